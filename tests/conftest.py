"""Shared fixtures: one local SparkSession for the suite, moto for AWS, canonical events."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

EVENTS = Path(__file__).parent / "events"


def load_event(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / name).read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from glue_processor.local.session import local_session

    session = local_session("tests", cores="2", driver_memory="2g", extra={"spark.sql.shuffle.partitions": "4"})
    yield session
    session.stop()


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """moto in-process, with fake credentials so nothing can reach a real account."""
    from moto import mock_aws

    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    with mock_aws():
        yield


@pytest.fixture(autouse=True)
def _no_real_aws_profile() -> None:
    os.environ.pop("AWS_PROFILE", None)
