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
from tests.lambdas.control_plane.test_handler_moto import STATE_BUCKET, invoke, plane, runs, script
from tests.lambdas.control_plane.test_surge import GB, _write, surging

__all__ = ["plane", "surging"]  # the fixtures, used by name
KEY = "control-plane/state.json"


def _state() -> dict[str, Any]:
    return json.loads(boto3.client("s3").get_object(Bucket=STATE_BUCKET, Key=KEY)["Body"].read())  # type: ignore[no-any-return]


def _dump(monkeypatch: pytest.MonkeyPatch) -> None:
    """100 GB of manifests just written, which a surge signal scales for."""
    monkeypatch.setenv("MANIFEST_BUCKET", "ingest-manifests")
    for n in range(10):
        _write(n, 10 * GB)


def _then(obj: Any, name: str, other: Any) -> dict[str, Any]:
    """``obj.<name>`` runs as it does, then, the first time, ``other()`` runs whole before the caller
    goes on (another invocation between this one's read and its write); returns ``{"other": its
    result}`` once it ran."""
    real = getattr(obj, name)
    seen: dict[str, Any] = {}

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        got = real(*args, **kwargs)
        if "other" not in seen:
            seen["other"] = other()
        return got

    setattr(obj, name, wrapped)
    return seen


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
    # and an unconditional write carries no condition
    store.save({**st, "desired_workers": 8})
    s3.put_object(Bucket=STATE_BUCKET, Key="elsewhere", Body=b"{}")  # the client's other PUTs neither
    assert store.load()["desired_workers"] == 8


def test_of_two_surge_signals_at_once_only_the_first_resizes(surging: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _dump(monkeypatch)
    first, second = handler._plane.__wrapped__(), handler._plane.__wrapped__()  # two Lambda containers
    stops: list[list[str]] = []
    real_stop = first.jobs.stop
    first.jobs.stop = lambda ids: stops.append(list(ids)) or real_stop(ids)  # type: ignore[method-assign]
    # Given the first reads the state and the job, and the second signal's tick runs whole before the
    # first goes on
    seen = _then(first.jobs, "view", lambda: second.surge().body)
    started = len(runs(surging))
    body = first.surge().body
    # Then the second scaled up and stopped the run; the first decided the same on the same state,
    # found the state written since, and stood down: no second stop, one decision recorded
    assert seen["other"]["decision"]["action"] == "scale" and seen["other"]["decision"]["desired_workers"] == 10
    assert body["decision"]["action"] == "scale" and body["result"].startswith("stood down")
    assert stops == [] and len(runs(surging)) == started
    assert runs(surging)[0]["JobRunState"] == "STOPPED"
    assert _state()["desired_workers"] == 10
    assert [d["action"] for d in _state()["decisions"]] == ["start", "scale"]  # the fixture's start, then one


def test_a_tick_that_decides_nothing_records_it_even_after_another_wrote(surging: Any) -> None:
    first, second = handler._plane.__wrapped__(), handler._plane.__wrapped__()
    _then(first.jobs, "view", second.tick)
    body = first.tick().body
    assert body["decision"]["action"] == "none" and "result" not in body
    assert [d["action"] for d in _state()["decisions"]][-2:] == ["none", "none"]  # both recorded


def test_a_scheduled_tick_that_decides_nothing_never_holds_a_surge_back(
    surging: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _dump(monkeypatch)
    signal, scheduled = handler._plane.__wrapped__(), handler._plane.__wrapped__()
    # on CloudWatch alone the scheduled tick has nothing to do: recorded first
    seen = _then(signal.jobs, "view", lambda: scheduled.tick().body)
    body = signal.surge().body
    # Then the surge's claim found only a record of doing nothing since its read, wrote over it, and acted
    assert seen["other"]["decision"]["action"] == "none"
    assert body["decision"]["action"] == "scale" and "result" not in body
    assert runs(surging)[0]["JobRunState"] == "STOPPED"
    assert [d["action"] for d in _state()["decisions"]][-2:] == ["none", "scale"]
    assert _state()["desired_workers"] == 10


def test_a_claim_that_went_in_though_its_retry_was_refused_acts(surging: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The PUT went in, its answer was lost, botocore's retry carried the same If-Match and got 412."""
    _dump(monkeypatch)
    plane = handler._plane.__wrapped__()
    real = plane.state.save_if
    lost: list[bool] = []

    def went_in_then_refused(state: dict[str, Any], version: str | None) -> None:
        real(state, version)
        if not lost:
            lost.append(True)
            raise StateConflict("injected: the retry of a write that went in")

    plane.state.save_if = went_in_then_refused  # type: ignore[method-assign]
    body = plane.surge().body
    assert lost and body["decision"]["action"] == "scale" and "result" not in body
    assert runs(surging)[0]["JobRunState"] == "STOPPED"
    assert [d["action"] for d in _state()["decisions"]][-1:] == ["scale"]


def test_an_operator_s_command_never_erases_a_tick_s_claim(surging: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _dump(monkeypatch)
    operator, signal = handler._plane.__wrapped__(), handler._plane.__wrapped__()
    # the signal claims 10 workers between the operator's read of the state and its write
    seen = _then(operator.state, "load_versioned", lambda: signal.surge().body)
    operator.handle("stop")  # pauses: written over the newest state, the claim's record kept
    assert seen["other"]["decision"]["action"] == "scale"
    state = _state()
    assert state["paused"] is True and state["desired_workers"] == 10
    assert [d["action"] for d in state["decisions"]][-2:] == ["scale", "none"]


def test_an_operator_s_stop_between_a_tick_s_claim_and_its_start_is_enforced_by_the_next_tick(plane: Any) -> None:
    # Given a run that just ended, so a tick decides to start one
    invoke({"command": "start"})
    script(runs(plane)[0]["Id"], "STOPPED", ago_s=5)
    tick, operator = handler._plane.__wrapped__(), handler._plane.__wrapped__()
    # When the operator's stop runs whole after the tick's claim went in, before its StartJobRun
    seen = _then(tick.state, "save_if", lambda: operator.handle("stop").body)
    assert tick.tick().body["decision"]["action"] == "start"
    assert seen["other"]["stopped"] == []  # nothing was running yet
    assert runs(plane)[0]["JobRunState"] == "STARTING" and _state()["paused"] is True
    # Then the next tick stops the run the raced start left going, and records it
    body = invoke()
    assert body["decision"]["action"] == "stop" and "paused" in body["decision"]["reason"]
    assert [r["JobRunState"] for r in runs(plane)] == ["STOPPED", "STOPPED"]
    assert _state()["paused"] is True and _state()["decisions"][-1]["action"] == "stop"
    # And once stopped, the ticks leave it alone
    assert invoke()["decision"]["action"] == "none" and len(runs(plane)) == 2
