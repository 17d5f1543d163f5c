"""Two control-plane invocations at once (a surge signal and the scheduled tick, or two manifest
Lambda containers' signals): of two ticks that decided on the same state, only the first to write it
acts. The state is one S3 object written with a conditional PUT (S3 User Guide, "Add preconditions
to S3 operations with conditional requests": If-Match fails with 412 Precondition Failed when the
ETag differs, If-None-Match: * when the object exists). Against moto S3, Glue and CloudWatch."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from lambdas.control_plane import handler
from lambdas.control_plane.state import S3StateStore, StateConflict
from tests.lambdas.control_plane.test_handler_moto import STATE_BUCKET, plane, runs
from tests.lambdas.control_plane.test_surge import GB, _write, surging

__all__ = ["plane", "surging"]  # the fixtures, used by name
KEY = "control-plane/state.json"


def test_a_state_write_goes_in_only_over_the_version_it_read(aws: None) -> None:
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket=STATE_BUCKET)
    store = S3StateStore(s3, STATE_BUCKET, KEY)
    st, version = store.load_versioned()
    assert version is None
    store.save_if({**st, "desired_workers": 3}, None)  # the first state
    with pytest.raises(StateConflict):
        store.save_if({**st, "desired_workers": 4}, None)  # another first state: one exists
    st, version = store.load_versioned()
    other = S3StateStore(boto3.client("s3", region_name="us-east-1"), STATE_BUCKET, KEY)
    other.save({**st, "desired_workers": 5})  # another invocation writes in between
    with pytest.raises(StateConflict):
        store.save_if({**st, "desired_workers": 6}, version)
    assert store.load()["desired_workers"] == 5
    st, version = store.load_versioned()
    store.save_if({**st, "desired_workers": 7}, version)
    assert store.load()["desired_workers"] == 7
    # and a plain write, as the operators' commands make, carries no condition
    store.save({**st, "desired_workers": 8})
    s3.put_object(Bucket=STATE_BUCKET, Key="elsewhere", Body=b"{}")  # the client's other PUTs neither
    assert store.load()["desired_workers"] == 8


def test_of_two_surge_signals_at_once_only_the_first_resizes(surging: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MANIFEST_BUCKET", "ingest-manifests")
    for n in range(10):
        _write(n, 10 * GB)
    first, second = handler._plane.__wrapped__(), handler._plane.__wrapped__()  # two Lambda containers
    stops: list[list[str]] = []
    real_stop = first.jobs.stop
    first.jobs.stop = lambda ids: stops.append(list(ids)) or real_stop(ids)  # type: ignore[method-assign]
    # Given the first reads the state and the job, and the second signal's tick runs whole before the
    # first goes on
    real_view = first.jobs.view
    seen: dict[str, Any] = {}

    def view_then_the_other_runs(**kwargs: Any) -> Any:
        got = real_view(**kwargs)
        if "second" not in seen:
            seen["second"] = second.surge().body
        return got

    first.jobs.view = view_then_the_other_runs  # type: ignore[method-assign]
    started = len(runs(surging))
    body = first.surge().body
    # Then the second scaled up and stopped the run; the first decided the same on the same state,
    # found the state written since, and stood down: no second stop, one decision recorded
    assert seen["second"]["decision"]["action"] == "scale" and seen["second"]["decision"]["desired_workers"] == 10
    assert body["decision"]["action"] == "scale" and body["result"].startswith("stood down")
    assert stops == [] and len(runs(surging)) == started
    assert runs(surging)[0]["JobRunState"] == "STOPPED"
    state = json.loads(boto3.client("s3").get_object(Bucket=STATE_BUCKET, Key=KEY)["Body"].read())
    assert state["desired_workers"] == 10
    assert [d["action"] for d in state["decisions"]] == ["start", "scale"]  # the fixture's start, then one


def test_a_tick_that_decides_nothing_records_it_even_after_another_wrote(surging: Any) -> None:
    first, second = handler._plane.__wrapped__(), handler._plane.__wrapped__()
    real_view = first.jobs.view

    def view_then_the_other_runs(**kwargs: Any) -> Any:
        got = real_view(**kwargs)
        second.tick()
        return got

    first.jobs.view = view_then_the_other_runs  # type: ignore[method-assign]
    body = first.tick().body
    assert body["decision"]["action"] == "none" and "result" not in body
    state = json.loads(boto3.client("s3").get_object(Bucket=STATE_BUCKET, Key=KEY)["Body"].read())
    assert [d["action"] for d in state["decisions"]][-2:] == ["none", "none"]  # both recorded
