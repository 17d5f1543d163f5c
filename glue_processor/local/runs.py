"""A local run's state between runs: ``<WORKDIR>/state/run.json``.

It stands in for the Glue job's run state (``make status``: active while its process lives, finished,
or died without finishing), and lets a rerun with nothing new return without starting Spark: a run
that finished cleanly drained every manifest it saw (available-now), so when nothing was fed since,
no manifest is waiting but those, no share is set aside, and the settings are the same, there is
nothing to do.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from contracts.exceptions import ConfigError
from contracts.layout import MANIFEST_SUFFIX, manifest_data_bytes
from glue_processor import faults
from glue_processor.local.layout import LocalLayout

DEFERRED = Path("_deferred") / "shares.json"  # glue_processor.commit.deferred.DEFERRED, under the output


@contextlib.contextmanager
def exclusive(layout: LocalLayout) -> Iterator[None]:
    """One make run at a time on a WORKDIR: a second is refused in one line (two would feed and
    drain the same landing bucket, and the later would take the earlier's manifests as drained)."""
    layout.state.mkdir(parents=True, exist_ok=True)
    if faults.TWO_RUNS:
        yield
        return
    with (layout.state / "run.lock").open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = read(layout).get("pid")
            raise ConfigError(
                f"WORKDIR={layout.workdir} is in use by another make run"
                + (f" (pid {holder})" if holder else "")
                + ": wait for it, or give another WORKDIR"
            ) from exc
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_file(layout: LocalLayout) -> Path:
    return layout.state / "run.json"


def read(layout: LocalLayout) -> dict[str, Any]:
    path = run_file(layout)
    if not path.exists():
        return {}
    try:
        item = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:  # a run killed mid-write (the file is replaced whole, so rarely): no clean finish
        return {}
    return item if isinstance(item, dict) else {}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def unfinished(layout: LocalLayout) -> str | None:
    """When the last run started and ended without finishing (``kill -9``, a crash, the machine
    going down): when it started. Asked under :func:`exclusive`, so that run is not alive (a live
    process of its pid is another one's, after a reboot)."""
    last = read(layout)
    if not last.get("pid") or last.get("finished_at"):
        return None
    return str(last.get("started_at") or "")


def mark_run(
    layout: LocalLayout,
    *,
    finished: bool,
    drained: Iterable[str] = (),
    fingerprint: str = "",
    began: datetime | None = None,
) -> None:
    """At a run's start (its pid; ``began``: when the run began, its feed included) and at its clean
    end (the manifests it drained, its settings)."""
    info = read(layout)
    if finished:
        info.update(
            finished_at=datetime.now().astimezone().isoformat(),
            pid=None,
            drained=sorted(drained),
            fingerprint=fingerprint,
        )
    else:
        now = datetime.now().astimezone()
        info.update(
            pid=os.getpid(),
            started_at=now.isoformat(),
            began_at=(began or now).isoformat(),  # make metrics: the feed's datums are the run's too
            finished_at=None,
        )
    path = run_file(layout)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(info), encoding="utf-8")
    os.replace(tmp, path)


@dataclass(frozen=True)
class Waiting:
    """The manifests listed for the job: how many, and the objects and data bytes they reference."""

    manifests: list[str]
    data_bytes: int


def waiting(layout: LocalLayout) -> Waiting:
    names = sorted(p.name for p in layout.manifests.glob(f"*{MANIFEST_SUFFIX}")) if layout.manifests.exists() else []
    return Waiting(names, sum(manifest_data_bytes(n) or 0 for n in names))


def fingerprint(*parts: str | bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() if isinstance(part, str) else part)
        digest.update(b"\0")
    return digest.hexdigest()


def nothing_to_do(layout: LocalLayout, *, fed: int, replayed: bool, settings_print: str) -> str | None:
    """When the last run finished cleanly, nothing was fed since, and it would run on the same
    settings: when it finished (else None: the job must run)."""
    last = read(layout)
    if fed or replayed or not last.get("finished_at") or last.get("pid"):
        return None
    if last.get("fingerprint") != settings_print:
        return None
    if not set(waiting(layout).manifests) <= set(last.get("drained", [])):
        return None
    deferred = layout.output / DEFERRED
    if deferred.exists() and deferred.read_text(encoding="utf-8").strip() not in ("", "[]", "{}"):
        return None
    return str(last["finished_at"])
