"""The control plane's small memory: paused flag, desired workers, recent decisions."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from aws_lambda_powertools import Logger
from botocore.exceptions import BotoCoreError, ClientError

from lambdas.control_plane.exceptions import ControlPlaneError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

logger = Logger(service="control-plane", child=True)
KEEP_DECISIONS = 20


class StateConflict(ControlPlaneError):
    """Another invocation wrote the state after this one read it."""


class StateStore(Protocol):
    def load(self) -> dict[str, Any]: ...

    def load_versioned(self) -> tuple[dict[str, Any], str | None]:
        """The state and its version (None: no state written yet)."""
        ...

    def save_if(self, state: dict[str, Any], version: str | None) -> None:
        """Write ``state`` only if the stored one is still ``version`` (None: still none), else
        raise :class:`StateConflict`."""
        ...


def empty_state() -> dict[str, Any]:
    return {"paused": False, "desired_workers": None, "decisions": []}


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def _is_rate(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0


# What each field the control plane reads must be; a field that is not is read as empty_state()'s.
FIELDS: dict[str, Callable[[Any], bool]] = {
    "paused": lambda v: isinstance(v, bool),
    "desired_workers": lambda v: v is None or _is_count(v),
    "decisions": lambda v: isinstance(v, list) and all(isinstance(d, dict) for d in v),
    "worker_bytes_per_s": lambda v: v is None or _is_rate(v),
    "scaled_up_at": lambda v: v is None or _is_aware_time(v),
}


def _is_aware_time(v: Any) -> bool:
    """An ISO 8601 time with its offset (what the control plane writes: ``datetime.isoformat()``)."""
    if not isinstance(v, str):
        return False
    try:
        return datetime.fromisoformat(v).tzinfo is not None
    except ValueError:
        return False


def parse_state(body: bytes, where: str) -> dict[str, Any]:
    """The state in ``body``. A body that is not a JSON object, or a field of the wrong type (a hand
    edit, a foreign writer), must not stop the control plane: it reads as empty_state() (that field
    only, for a field), with an error logged naming the object; the next write replaces it."""
    try:
        loaded = json.loads(body)
    except ValueError as exc:  # JSONDecodeError, or bytes that are not UTF-8
        return _unreadable(where, f"not JSON ({exc}); read as the empty state", empty_state())
    if not isinstance(loaded, dict):
        problem = f"not a JSON object but {type(loaded).__name__}; read as the empty state"
        return _unreadable(where, problem, empty_state())
    state = {**empty_state(), **loaded}
    wrong = [k for k, ok in FIELDS.items() if not ok(state.get(k))]
    if wrong:
        bad = ", ".join(f"{k}={state[k]!r:.80}" for k in wrong)
        problem = f"wrong type: {bad}; read as the empty state's"
        return _unreadable(where, problem, {**state, **{k: empty_state().get(k) for k in wrong}})
    return state


def _unreadable(where: str, problem: str, state: dict[str, Any]) -> dict[str, Any]:
    logger.error(
        f"control-plane state {where} unreadable: {problem}",
        extra={"object": where, "problem": problem},
    )
    return state


def with_decision(state: dict[str, Any], record: dict[str, Any]) -> list[dict[str, Any]]:
    """The state's decisions with ``record`` last, the oldest past KEEP_DECISIONS dropped."""
    return [*state.get("decisions", []), record][-KEEP_DECISIONS:]


class S3StateStore:
    """The state as one S3 object; :meth:`save_if` is an S3 conditional write (``If-Match`` on the
    ETag read, ``If-None-Match: *`` for a first state), so of two invocations that read the same
    state only the first one's write goes in (S3 User Guide, "Add preconditions to S3 operations with
    conditional requests"). The header is added at signing time: the Lambda runtime's boto3 predates
    the ``IfMatch`` parameter of PutObject."""

    def __init__(self, client: S3Client, bucket: str, key: str) -> None:
        self.client, self.bucket, self.key = client, bucket, key
        self._condition: tuple[str, str] | None = None  # the header of the next PutObject, if any
        client.meta.events.register_first(
            "before-sign.s3.PutObject", self._add_condition, unique_id=f"control-plane-state-{id(self)}"
        )

    def _add_condition(self, request: Any, **_: Any) -> None:
        if self._condition is not None:
            request.headers[self._condition[0]] = self._condition[1]

    def load(self) -> dict[str, Any]:
        return self.load_versioned()[0]

    def load_versioned(self) -> tuple[dict[str, Any], str | None]:
        try:
            got = self.client.get_object(Bucket=self.bucket, Key=self.key)
            body = got["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in {"NoSuchKey", "404"}:
                return empty_state(), None
            raise ControlPlaneError(f"read s3://{self.bucket}/{self.key} failed: {exc}") from exc
        except BotoCoreError as exc:
            raise ControlPlaneError(f"read s3://{self.bucket}/{self.key} failed: {exc}") from exc
        return parse_state(body, f"s3://{self.bucket}/{self.key}"), got["ETag"]

    def save(self, state: dict[str, Any]) -> None:
        self._put(state)

    def save_if(self, state: dict[str, Any], version: str | None) -> None:
        self._condition = ("If-None-Match", "*") if version is None else ("If-Match", version)
        try:
            self._put(state)
        finally:
            self._condition = None

    def _put(self, state: dict[str, Any]) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self.key, Body=json.dumps(state, default=str).encode())
        except ClientError as exc:
            error = exc.response.get("Error", {}).get("Code")
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if self._condition is not None and (
                error in {"PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"} or status in {409, 412}
            ):
                raise StateConflict(f"s3://{self.bucket}/{self.key} changed since it was read") from exc
            raise ControlPlaneError(f"write s3://{self.bucket}/{self.key} failed: {exc}") from exc
        except BotoCoreError as exc:
            raise ControlPlaneError(f"write s3://{self.bucket}/{self.key} failed: {exc}") from exc


class FileStateStore:
    """The state as a local file (``make status``): one process at a time, so a version is the
    content's hash and :meth:`save_if` only compares it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, Any]:
        return self.load_versioned()[0]

    def load_versioned(self) -> tuple[dict[str, Any], str | None]:
        if not self.path.exists():
            return empty_state(), None
        body = self.path.read_bytes()
        return parse_state(body, str(self.path)), hashlib.sha256(body).hexdigest()

    def save_if(self, state: dict[str, Any], version: str | None) -> None:
        if self.load_versioned()[1] != version:
            raise StateConflict(f"{self.path} changed since it was read")
        self.save(state)

    def save(self, state: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, default=str, indent=1), encoding="utf-8")
        tmp.replace(self.path)
