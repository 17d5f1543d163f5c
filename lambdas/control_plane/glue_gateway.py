"""The Glue job, as the control plane sees and drives it (boto3 client injected)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from lambdas.control_plane.decision import ACTIVE, FAILED, JobView
from lambdas.control_plane.exceptions import ControlPlaneError

if TYPE_CHECKING:
    from mypy_boto3_glue import GlueClient


class JobGateway(Protocol):
    def view(self, *, paused: bool, desired_workers: int | None) -> JobView: ...
    def active_run_ids(self) -> list[str]: ...
    def start(
        self,
        *,
        workers: int,
        worker_type: str,
        auto_scaling: bool,
        max_bytes_per_trigger: int | None = None,
        max_files_per_trigger: int | None = None,
    ) -> str: ...
    def stop(self, run_ids: list[str]) -> None: ...


class GlueJobGateway:
    def __init__(self, client: GlueClient, job_name: str, *, history: int = 25) -> None:
        self.client = client
        self.job_name = job_name
        self.history = history

    def runs(self) -> list[dict[str, Any]]:
        """Recent runs, newest first."""
        try:
            runs = self.client.get_job_runs(JobName=self.job_name, MaxResults=self.history)["JobRuns"]
        except (ClientError, BotoCoreError) as exc:
            raise ControlPlaneError(f"get_job_runs {self.job_name} failed: {exc}") from exc
        return sorted(runs, key=lambda r: r["StartedOn"], reverse=True)  # type: ignore[arg-type]

    def view(self, *, paused: bool, desired_workers: int | None) -> JobView:
        return view_of(self.runs(), paused=paused, desired_workers=desired_workers)

    def active_run_ids(self) -> list[str]:
        return [r["Id"] for r in self.runs() if r["JobRunState"] in ACTIVE]

    def start(
        self,
        *,
        workers: int,
        worker_type: str,
        auto_scaling: bool,
        max_bytes_per_trigger: int | None = None,
        max_files_per_trigger: int | None = None,
    ) -> str:
        """Start a run; ``max_bytes_per_trigger`` and ``max_files_per_trigger`` override the job's
        default batch bounds for it."""
        args = {"--enable-auto-scaling": "true"} if auto_scaling else {}
        if max_bytes_per_trigger is not None:
            args["--max_bytes_per_trigger"] = str(max_bytes_per_trigger)
        if max_files_per_trigger is not None:
            args["--max_files_per_trigger"] = str(max_files_per_trigger)
        try:
            return self.client.start_job_run(
                JobName=self.job_name,
                NumberOfWorkers=workers,
                WorkerType=worker_type,  # type: ignore[arg-type]
                Arguments=args,
            )["JobRunId"]
        except (ClientError, BotoCoreError) as exc:
            raise ControlPlaneError(f"start_job_run {self.job_name} failed: {exc}") from exc

    def stop(self, run_ids: list[str]) -> None:
        """Graceful stop: Glue signals the driver, which stops the query between batches."""
        if not run_ids:
            return
        try:
            out = self.client.batch_stop_job_run(JobName=self.job_name, JobRunIds=run_ids)
        except (ClientError, BotoCoreError) as exc:
            raise ControlPlaneError(f"batch_stop_job_run {self.job_name} failed: {exc}") from exc
        if out.get("Errors"):
            raise ControlPlaneError(f"batch_stop_job_run {self.job_name}: {out['Errors']}")


def view_of(runs: list[dict[str, Any]], *, paused: bool, desired_workers: int | None) -> JobView:
    """Summarise runs (newest first) into a :class:`JobView`."""
    if not runs:
        return JobView("NONE", paused=paused, desired_workers=desired_workers)
    latest = runs[0]
    failures = 0  # consecutive FAILED/ERROR runs; a routine end (ROUTINE_END) resets the count
    for run in runs:
        if run["JobRunState"] not in FAILED:
            break
        failures += 1
    last_failure: datetime | None = runs[0].get("CompletedOn") if failures else None
    return JobView(
        state=latest["JobRunState"],
        workers=latest.get("NumberOfWorkers"),
        started_at=latest.get("StartedOn"),
        consecutive_failures=failures,
        last_failure_at=last_failure,
        paused=paused,
        desired_workers=desired_workers,
        ended_at=latest.get("CompletedOn"),
    )
