"""``make status``: the control plane's ``status`` and ``dry-run`` against a local run.

The local run stands in for the Glue job: ``<WORKDIR>/state/run.json`` says whether a run is
active (its process is alive), finished, or died without finishing (reported as FAILED).
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from contracts.exceptions import ConfigError
from contracts.layout import manifest_data_bytes
from glue_processor.local.errors import Parser, cli, user_path
from glue_processor.local.layout import LocalLayout
from glue_processor.local.runs import Waiting, alive, read, run_file, waiting
from lambdas.control_plane.decision import JobView
from lambdas.control_plane.metrics_reader import JsonlReader
from lambdas.control_plane.service import ControlPlane
from lambdas.control_plane.settings import load_settings
from lambdas.control_plane.state import FileStateStore

LOCAL_JOB = "local"


class LocalJobGateway:
    """The local run as a 'job': RUNNING, STOPPED (finished), FAILED (died), or NONE."""

    def __init__(self, layout: LocalLayout, workers: int) -> None:
        self.layout = layout
        self.workers = workers

    def view(self, *, paused: bool, desired_workers: int | None) -> JobView:
        path = run_file(self.layout)
        if not path.exists():
            return JobView("NONE", paused=paused, desired_workers=desired_workers)
        info = json.loads(path.read_text())
        started = datetime.fromisoformat(info["started_at"]) if info.get("started_at") else None
        if info.get("pid") and alive(int(info["pid"])):
            state = "RUNNING"
        elif info.get("pid"):
            state = "FAILED"
        else:
            state = "STOPPED"
        failed_at = datetime.fromtimestamp(path.stat().st_mtime).astimezone() if state == "FAILED" else None
        return JobView(
            state,
            workers=self.workers,
            started_at=started,
            consecutive_failures=int(state == "FAILED"),
            last_failure_at=failed_at,
            paused=paused,
            desired_workers=desired_workers,
        )

    def active_run_ids(self) -> list[str]:
        return []

    def start(
        self,
        *,
        workers: int,
        worker_type: str,
        auto_scaling: bool,
        max_bytes_per_trigger: int | None = None,
        max_files_per_trigger: int | None = None,
    ) -> str:
        return "local: run `make run` to start"

    def stop(self, run_ids: list[str]) -> None:
        return


def render(status: dict[str, Any], dry: dict[str, Any], waiting: Waiting | None = None) -> str:
    job = status["job"]
    lines = [f"job: {job['state']}  workers: {job['workers']}  started: {job['started_at']}  paused: {job['paused']}"]
    if waiting is not None:
        lines.append(
            f"manifests waiting: {len(waiting.manifests)} ({waiting.data_bytes / 1e6:,.1f} MB of data)"
            + ("; make run loads them" if waiting.manifests and job["state"] != "RUNNING" else "")
        )
    lines.append("last batches (newest last):")
    for name, values in status["last_batches"].items():
        lines.append(f"  {name:<22} " + "  ".join(f"{v:,.2f}" for v in values))
    lines.append("backlog: " + ", ".join(f"{k}={v if v is not None else 'n/a'}" for k, v in status["backlog"].items()))
    d = dry["decision"]
    lines.append(f"dry-run decision: {d['action']} -> {d['desired_workers']} workers: {d['reason']}")
    if d["action"] == "start" and job["state"] != "RUNNING":
        # the control plane keeps a 24/7 job alive, backlog or not; a local run drains and stops
        lines.append("  (on AWS the control plane keeps the streaming job running 24/7; locally, make run starts it)")
    lines.append(f"  inputs: {json.dumps(d['inputs'])}")
    if status["recent_decisions"]:
        lines.append("recent decisions:")
        lines += [
            f"  {x['at']} {x['action']} {x['desired_workers']}: {x['reason']}" for x in status["recent_decisions"]
        ]
    return "\n".join(lines)


@cli
def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="ingest-status", description=__doc__)
    p.add_argument("--workdir", type=user_path, default=Path(".work"))
    p.add_argument("--workers", type=int, default=2, help="workers the local job stands for (default 2)")
    args = p.parse_args(argv)
    layout = LocalLayout(args.workdir.resolve())
    if not layout.metrics.exists():
        raise ConfigError(f"WORKDIR={args.workdir}: no metrics.jsonl here; run make run WORKDIR={args.workdir} first")
    settings = load_settings(job_name=LOCAL_JOB, cooldown_s=0)
    plane = ControlPlane(
        settings,
        jobs=LocalJobGateway(layout, args.workers),
        metrics=JsonlReader(layout.metrics, settings.dimensions),
        state=FileStateStore(layout.state / "control-plane.json"),
    )
    # a manifest the last run drained may still be listed until the next run archives it
    listed = waiting(layout)
    drained = set(read(layout).get("drained", []))
    left = Waiting([m for m in listed.manifests if m not in drained], 0)
    left = Waiting(left.manifests, sum(manifest_data_bytes(m) or 0 for m in left.manifests))
    print(render(plane.handle("status").body, plane.handle("dry-run").body, left))
    return 0


if __name__ == "__main__":
    sys.exit(main())
