"""The control plane's small memory: paused flag, desired workers, recent decisions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from lambdas.control_plane.exceptions import ControlPlaneError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

KEEP_DECISIONS = 20


class StateStore(Protocol):
    def load(self) -> dict[str, Any]: ...
    def save(self, state: dict[str, Any]) -> None: ...


def empty_state() -> dict[str, Any]:
    return {"paused": False, "desired_workers": None, "decisions": []}


class S3StateStore:
    def __init__(self, client: S3Client, bucket: str, key: str) -> None:
        self.client, self.bucket, self.key = client, bucket, key

    def load(self) -> dict[str, Any]:
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self.key)["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in {"NoSuchKey", "404"}:
                return empty_state()
            raise ControlPlaneError(f"read s3://{self.bucket}/{self.key} failed: {exc}") from exc
        except BotoCoreError as exc:
            raise ControlPlaneError(f"read s3://{self.bucket}/{self.key} failed: {exc}") from exc
        return {**empty_state(), **json.loads(body)}

    def save(self, state: dict[str, Any]) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self.key, Body=json.dumps(state, default=str).encode())
        except (ClientError, BotoCoreError) as exc:
            raise ControlPlaneError(f"write s3://{self.bucket}/{self.key} failed: {exc}") from exc


class FileStateStore:
    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, Any]:
        if not self.path.exists():
            return empty_state()
        return {**empty_state(), **json.loads(self.path.read_text(encoding="utf-8"))}

    def save(self, state: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, default=str, indent=1), encoding="utf-8")
        tmp.replace(self.path)
