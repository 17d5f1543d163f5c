"""Shared fixtures: one local SparkSession for the suite, moto for AWS, canonical events."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

EVENTS = Path(__file__).parent / "events"
ROOT = Path(__file__).parent.parent
# Tests that build what ships in paths every process of the checkout shares: the wheel (pip wheel of
# the repo, through its build/), the Lambda zip and its unpacked copy, the Glue-like venvs under .parity/
# (infra/package.py, infra/parity.py). make test runs the suite on two processes (pytest-xdist): each
# such test runs holding one file lock (BUILDS_LOCK), so no two build one path at once. (Not an xdist
# group: with pytest 9.2, xdist 3.8 hands a group's tests to any worker, pytest-xdist#1386.)
BUILDS = (
    "tests/lambdas/",
    "tests/infra/test_package.py",
    "tests/infra/test_shipped.py",
    "tests/infra/test_lambda_sdk.py",
)
BUILDS_LOCK = ROOT / ".parity" / ".tests-building.lock"
# The suite's longest tests (each a local run in processes of its own, 20-60 s): handed out first, so
# no worker ends with one of them while the other has nothing left.
LONGEST = ("tests/local/", "tests/test_backfill.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # runs in every xdist worker, on the same collection: each sorts it the same way
    for item in items:
        if item.nodeid.startswith(BUILDS):
            item.add_marker(pytest.mark.builds)
    items.sort(key=lambda item: not item.nodeid.startswith(LONGEST))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    """A test marked ``builds`` runs (its fixtures' setup and teardown too) holding BUILDS_LOCK."""
    if item.get_closest_marker("builds") is None:
        return (yield)
    BUILDS_LOCK.parent.mkdir(exist_ok=True)
    with BUILDS_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        return (yield)


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
