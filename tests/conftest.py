"""Shared fixtures: one local SparkSession for the suite, moto for AWS, canonical events."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

EVENTS = Path(__file__).parent / "events"
ROOT = Path(__file__).parent.parent
# Tests that build what ships in shared places: the wheel (pip wheel of the repo, through its build/),
# the Lambda zip unpacked and the Glue-like venvs under .parity/ (infra/package.py, infra/parity.py).
# make test runs the suite on every core (pytest-xdist, --dist loadgroup): these go to one worker, one
# after another, so no two build the same path at once.
PARITY = (
    "tests/lambdas/",
    "tests/infra/test_package.py",
    "tests/infra/test_shipped.py",
    "tests/infra/test_lambda_sdk.py",
)


# The suite's longest tests (each a local run in processes of its own, 20-60 s): handed out first, so
# the workers do not end waiting on one of them.
LONGEST = ("tests/local/", "tests/test_backfill.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("dist", "no") == "no":
        return
    for item in items:
        if item.path.relative_to(ROOT).as_posix().startswith(PARITY):
            item.add_marker(pytest.mark.xdist_group("parity"))
    items.sort(key=lambda item: not item.path.relative_to(ROOT).as_posix().startswith(LONGEST))


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
