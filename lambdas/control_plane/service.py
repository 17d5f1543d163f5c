"""The control plane's commands: tick (scheduled), status, start, stop, restart, scale, dry-run."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from aws_lambda_powertools import Logger

from contracts import metrics as M
from contracts.intake import JOB_MAX_MANIFEST_BYTES, most_manifests
from contracts.metrics import Datum, datum
from lambdas.control_plane.decision import ACTIVE, Decision, JobView, Observation, batch_bytes, decide
from lambdas.control_plane.exceptions import ControlPlaneError
from lambdas.control_plane.glue_gateway import JobGateway
from lambdas.control_plane.metrics_reader import MetricsReader
from lambdas.control_plane.observation import observe
from lambdas.control_plane.optimizers import OptimizerHealth, OptimizerWatch, WatchReport
from lambdas.control_plane.settings import ControlSettings
from lambdas.control_plane.state import StateConflict, StateStore, with_decision
from lambdas.control_plane.surge import (
    SURGE_WINDOW_S,
    ManifestListing,
    ceiling_bytes_per_s,
    is_surge,
    lookback,
    with_written,
    written_in_window,
)

logger = Logger(service="control-plane", child=True)
Command = Literal["tick", "surge", "status", "start", "stop", "restart", "scale", "dry-run"]
BATCH_FIGURES = (
    "BatchDuration",
    "RecordsIn",
    "RecordsOut",
    "Utilization",
    "EndToEndLatencyMax",
    "BadRecords",
)
# Decisions that act on the job: of two ticks that decided on the same state, only one does.
ACTING = {"start", "restart", "scale", "stop"}
# Conditional writes of the state before giving up (each refused one means another invocation wrote).
STATE_WRITE_TRIES = 5


@dataclass
class Outcome:
    """What a command did and saw; ``body`` is the Lambda's response."""

    body: dict[str, Any]
    datums: list[Datum] = field(default_factory=list)
    error: str | None = None  # what went wrong after the command acted: the Lambda fails with it


class ControlPlane:
    def __init__(
        self,
        settings: ControlSettings,
        *,
        jobs: JobGateway,
        metrics: MetricsReader,
        state: StateStore,
        optimizers: OptimizerWatch | None = None,
        listing: ManifestListing | None = None,
        clock: Any = None,
    ) -> None:
        self.s = settings
        self.jobs = jobs
        self.metrics = metrics
        self.state = state
        self.optimizers = optimizers
        self.listing = listing
        self.clock = clock or (lambda: datetime.now(UTC))
        self._observed = Observation()  # the latest tick's (what a start sizes its batches from)

    def handle(self, command: Command, workers: int | None = None) -> Outcome:
        if command == "status":
            return self.status()
        if command == "dry-run":
            decision, view = self._decide()
            return Outcome({"command": "dry-run", "decision": decision.as_json(), "job": _view_json(view)})
        if command == "start":
            return self._operator_start()
        if command == "stop":
            return self._operator_stop()
        if command == "restart":
            return self._operator_restart()
        if command == "scale":
            if workers is None:
                raise ControlPlaneError("scale needs 'workers'")
            return self._operator_scale(workers)
        if command == "surge":
            return self.surge()
        return self.tick()

    # -- scheduled ------------------------------------------------------------------------------
    def tick(self, *, written: Sequence[tuple[datetime, float]] | None = None) -> Outcome:
        """``written``: the manifests a surge listed (see :meth:`surge`)."""
        decision, view, st, version = self._decide_on_state(written=written)
        changes: dict[str, Any] = {}
        learned = self._observed.worker_bytes_per_s
        if learned is not None and learned != st.get("worker_bytes_per_s"):
            changes["worker_bytes_per_s"] = learned  # what the runs taught outlives them
        if decision.action == "scale":
            # Glue cannot resize a running job: remember the size, stop gracefully; the next tick
            # starts the job again from its checkpoint with the new size
            changes["desired_workers"] = decision.desired_workers
            if decision.desired_workers > (view.workers or 0):
                changes["scaled_up_at"] = self.clock().isoformat()  # no scale-down for a while after
        if not self._claim(st, version, decision, changes):
            why = "stood down: another invocation acted, paused or resized since this tick read the state"
            return Outcome({"command": "tick", "decision": decision.as_json(), "result": why})
        self._act(decision)
        body: dict[str, Any] = {"command": "tick", "decision": decision.as_json()}
        datums = self._datums(view, decision)
        optimizers = None if written is not None else self._watch_optimizers()
        if optimizers is not None:
            body["unhealthy_optimizers"] = optimizers.unhealthy
            if optimizers.done or optimizers.queued:
                body["optimizer_changes"] = {"done": list(optimizers.done), "queued": list(optimizers.queued)}
            unhealthy = len(optimizers.unhealthy)
            datums.append(datum(M.TABLE_OPTIMIZERS_UNHEALTHY, unhealthy, {"JobName": self.s.job_name}))
        error = decision.inputs.get("metrics_error")
        if error is not None:  # the job was kept alive; the Lambda still fails, for the errors alarm
            body["sizing_skipped"] = f"metrics unreadable: {error}"
            return Outcome(body, datums, error=f"tick acted ({decision.action}), but sizing skipped: {error}")
        return Outcome(body, datums)

    def surge(self, oldest: datetime | None = None) -> Outcome:
        """The manifest Lambda's signal that an invocation wrote much (``contracts.surge``): when the
        manifests written within SURGE_WINDOW_S are more than max_workers clear in it (a dump), a tick
        at once on an observation that counts them, instead of up to 2 minutes later on CloudWatch
        datapoints another minute behind. Otherwise nothing: one listing, no CloudWatch read.
        ``oldest``: the earliest event the signalling invocation's manifests are named after."""
        if self.listing is None or self.s.scaling_mode != "control-plane" or self.s.worker_mb_s <= 0:
            return Outcome({"command": "surge", "result": "ignored: no MANIFEST_BUCKET, or not sized by need"})
        known = Observation(worker_bytes_per_s=self.state.load().get("worker_bytes_per_s"))
        now = self.clock()
        try:
            listed = self.listing.written_since(now - lookback(self.s), named_from=oldest)
        except ControlPlaneError as exc:  # the scheduled tick still sizes the job; say why here
            logger.error("surge signal: the manifests could not be listed", extra={"error": str(exc)})
            return Outcome({"command": "surge", "result": f"ignored: {exc}"})
        written = written_in_window(listed, now)
        if not is_surge(written, known, self.s):
            clear = ceiling_bytes_per_s(known, self.s) * SURGE_WINDOW_S
            result = (
                f"no surge: {written / 1e9:.1f} GB written in {SURGE_WINDOW_S:.0f}s, "
                f"not over the {clear / 1e9:.1f} GB max_workers={self.s.max_workers} clear in it"
            )
            return Outcome({"command": "surge", "result": result, "written_bytes": written})
        outcome = self.tick(written=listed)
        outcome.body |= {"command": "surge", "written_bytes": written}
        return outcome

    def _watch_optimizers(self) -> WatchReport | None:
        """The table optimizers, kept to the stack's settings, and those missing, disabled, failed or
        unreadable (None: not watched)."""
        if self.optimizers is None:
            return None
        try:
            report = self.optimizers.watch()
        except ControlPlaneError as exc:  # watching must never stop the tick that keeps the job alive; it alarms
            logger.error("could not watch the table optimizers", extra={"error": str(exc)})
            return WatchReport((OptimizerHealth("optimizers", found=False, unknown=str(exc)),))
        if report.done or report.queued:
            logger.info("table optimizers kept", extra={"done": list(report.done), "queued": list(report.queued)})
        if report.unhealthy:
            logger.error("table optimizers not maintaining the table", extra={"optimizers": report.unhealthy})
        return report

    def _decide(self, *, written: Sequence[tuple[datetime, float]] | None = None) -> tuple[Decision, JobView]:
        decision, view, _, _ = self._decide_on_state(written=written)
        return decision, view

    def _decide_on_state(
        self, *, written: Sequence[tuple[datetime, float]] | None = None
    ) -> tuple[Decision, JobView, dict[str, Any], str | None]:
        """The decision, the job as seen, and the state (and its version) it was decided on."""
        st, version = self.state.load_versioned()
        view = self.jobs.view(paused=bool(st["paused"]), desired_workers=st.get("desired_workers"))
        if st.get("scaled_up_at"):
            view = dataclasses.replace(view, scaled_up_at=datetime.fromisoformat(st["scaled_up_at"]))
        now = self.clock()
        obs, error = self._observe(view, st, now)
        if written is not None and error is None:
            obs = with_written(obs, written, now)
        self._observed = obs
        decision = decide(obs, view, self.s, now)
        if error is not None:  # with no datapoints, decide() keeps alive and holds the size
            decision = dataclasses.replace(
                decision,
                reason=f"{decision.reason}; sizing skipped, the size kept: metrics unreadable",
                inputs=decision.inputs | {"metrics_error": error},
            )
        if written is not None:
            backlog = obs.backlog_bytes[-1] / 1e9 if obs.backlog_bytes else 0.0
            why = f"surge: backlog {backlog:.1f} GB with the manifests listed; {decision.reason}"
            decision = dataclasses.replace(decision, reason=why)
        return decision, view, st, version

    def _observe(self, view: JobView, st: dict[str, Any], now: datetime) -> tuple[Observation, str | None]:
        """The metrics the sizing reads, or none and why: only the sizing needs them, so a CloudWatch
        failure (throttling, a denied read) must not stop a tick from keeping the job alive."""
        try:
            obs = observe(
                self.metrics,
                self.s,
                workers=view.workers if view.state == "RUNNING" else None,
                running_since=view.started_at,
                now=now,
                remembered_rate=st.get("worker_bytes_per_s"),
            )
        except ControlPlaneError as exc:
            logger.error("metrics unreadable: sizing skipped, the size kept", extra={"error": str(exc)})
            return Observation(worker_bytes_per_s=st.get("worker_bytes_per_s")), str(exc)
        return obs, None

    def _claim(self, st: dict[str, Any], version: str | None, decision: Decision, changes: dict[str, Any]) -> bool:
        """Write the tick's decision, and what it changes, over the state it was decided on, only if
        no other invocation wrote it since (an S3 conditional write); True when the tick may act.

        Of two ticks at once (a surge signal and the scheduled tick, two surge signals) that would
        both act, only the first to write does: they used to make two stops, and the later one's size
        won. When the state changed in a way that does not touch the decision (another tick recorded
        that it did nothing, or a learned rate), the claim is written again over it: a scheduled tick
        that decides nothing never holds a surge back. A write whose answer was lost and whose retry
        was refused is recognised by the claim's id in the state."""
        record = {"at": self.clock().isoformat(), **decision.as_json(), "claim": uuid.uuid4().hex[:16]}
        for _ in range(STATE_WRITE_TRIES):
            claimed = {**st, **changes, "decisions": with_decision(st, record)}
            try:
                self.state.save_if(claimed, version)
                return True
            except StateConflict:
                now, version = self.state.load_versioned()
            if any(d.get("claim") == record["claim"] for d in now.get("decisions", [])):
                return True  # it went in: S3 refused the retry of a write whose answer was lost
            if decision.action in ACTING and _acted_since(st, now):
                logger.warning("another invocation acted since this tick read the state; it stands down", extra=record)
                return False
            st = now
        raise ControlPlaneError(
            "the control plane's state kept changing while this tick wrote it; the next one decides"
        )

    def _act(self, decision: Decision) -> None:
        logger.info("decision", extra={"decision": decision.as_json()})
        if decision.action in ("start", "restart"):
            self._start(decision.desired_workers)
        elif decision.action == "scale":
            self.jobs.stop(self.jobs.active_run_ids())
        elif decision.action == "stop":
            ids = self.jobs.active_run_ids()
            logger.warning("a run is active while paused: stopping it", extra={"run_ids": ids})
            self.jobs.stop(ids)
        elif decision.action == "alarm":
            logger.error("restarts exhausted", extra={"decision": decision.as_json()})

    def _start(self, workers: int) -> None:
        auto = self.s.scaling_mode == "glue-auto-scaling"
        # need-based sizing starts each run with a batch bound its size clears in a share of the SLA;
        # Glue auto scaling's one run, with the bound of the most workers it may grow to (the job's own
        # default, 16 GiB a trigger, would cap its intake at 573 MB/s whatever it grows to)
        bound = (
            batch_bytes(self.s.max_workers if auto else workers, self._observed, self.s)
            if self.s.worker_mb_s > 0
            else None
        )
        # the job counts manifests to the bound by their bytes, at most --max_files_per_trigger of
        # them: a bound past what its default count of full manifests holds raises the count too
        base = self.s.max_files_per_trigger
        files = most_manifests(bound, base, JOB_MAX_MANIFEST_BYTES) if bound else None
        files = files if files is not None and files > base else None
        run_id = self.jobs.start(
            workers=self.s.max_workers if auto else workers,
            worker_type=self.s.worker_type,
            auto_scaling=auto,
            max_bytes_per_trigger=bound,
            max_files_per_trigger=files,
        )
        logger.info(
            "job run started",
            extra={
                "run_id": run_id,
                "workers": workers,
                "auto_scaling": auto,
                "max_bytes_per_trigger": bound,
                "max_files_per_trigger": files,
            },
        )

    # -- operators ------------------------------------------------------------------------------
    def _operator_start(self) -> Outcome:
        self._remember(paused=False)
        view = self.jobs.view(paused=False, desired_workers=self.state.load().get("desired_workers"))
        if view.state in ("STARTING", "RUNNING", "WAITING"):
            return Outcome({"command": "start", "result": f"already {view.state}"})
        workers = view.desired_workers or view.workers or self.s.min_workers
        self._start(workers)
        decision = Decision("start", workers, "operator start", {"state": view.state})
        self._record(decision)
        return Outcome({"command": "start", "decision": decision.as_json()})

    def _operator_stop(self) -> Outcome:
        self._remember(paused=True)
        ids = self.jobs.active_run_ids()
        self.jobs.stop(ids)
        self._record(Decision("none", 0, f"operator stop of {len(ids)} run(s); paused"))
        return Outcome({"command": "stop", "stopped": ids})

    def _operator_restart(self) -> Outcome:
        """Graceful stop of the active run; the next tick starts it again with the same workers.

        Used after a deploy so the job runs the new code. Glue allows one run at a time
        (MaxConcurrentRuns 1), so the start waits until the stopped run has ended.
        """
        st = self.state.load()
        view = self.jobs.view(paused=bool(st["paused"]), desired_workers=st.get("desired_workers"))
        ids = self.jobs.active_run_ids()
        if not ids:
            if view.paused:
                refusal = "refused: no active run and paused by an operator; 'start' resumes"
                return Outcome({"command": "restart", "result": refusal})
            if view.state == "STOPPING":
                return Outcome(
                    {"command": "restart", "result": "refused: a run is stopping; the next tick starts the job"}
                )
            workers = view.desired_workers or view.workers or self.s.min_workers
            self._start(workers)
            decision = Decision("start", workers, f"restart: no active run (latest: {view.state}); started one")
            self._record(decision)
            result = "no active run to restart; started one"
            return Outcome({"command": "restart", "result": result, "decision": decision.as_json()})
        workers = view.workers or view.desired_workers or self.s.min_workers
        self._remember(desired_workers=workers)
        self.jobs.stop(ids)
        decision = Decision(
            "restart", workers, f"operator restart of {len(ids)} run(s): stopped gracefully; the next tick starts it"
        )
        self._record(decision)
        return Outcome({"command": "restart", "decision": decision.as_json(), "stopped": ids})

    def _operator_scale(self, workers: int) -> Outcome:
        if not self.s.min_workers <= workers <= self.s.max_workers:
            raise ControlPlaneError(f"workers must be within [{self.s.min_workers}, {self.s.max_workers}]")
        self._remember(desired_workers=workers, paused=False)
        ids = self.jobs.active_run_ids()
        self.jobs.stop(ids)
        decision = Decision("scale", workers, f"operator scale to {workers}; restarts from the checkpoint")
        self._record(decision)
        return Outcome({"command": "scale", "decision": decision.as_json(), "stopped": ids})

    # -- status ---------------------------------------------------------------------------------
    def status(self) -> Outcome:
        st = self.state.load()
        decision, view = self._decide()
        body: dict[str, Any] = {"command": "status", "job": _view_json(view), "last_batches": {}, "backlog": {}}
        try:
            body["last_batches"] = {
                name: self.metrics.series(name, minutes=self.s.lookback_minutes, stat="Maximum")[-5:]
                for name in BATCH_FIGURES
            }
            body["backlog"] = {
                name: next(reversed(self.metrics.series(name, minutes=self.s.lookback_minutes)), None)
                for name in (M.BACKLOG_MANIFESTS.name, M.BACKLOG_BYTES.name, M.BACKLOG_AGE.name)
            }
        except ControlPlaneError as exc:  # the job, the decision and the record are still worth showing
            body["metrics_error"] = str(exc)
        body |= {"would_decide": decision.as_json(), "recent_decisions": st.get("decisions", [])[-5:]}
        return Outcome(body)

    # -- helpers --------------------------------------------------------------------------------
    def _remember(self, **changes: Any) -> None:
        self._update(lambda st: st.update(changes))

    def _record(self, decision: Decision) -> None:
        record = {"at": self.clock().isoformat(), **decision.as_json()}
        self._update(lambda st: st.update(decisions=with_decision(st, record)))

    def _update(self, change: Callable[[dict[str, Any]], None]) -> None:
        """``change`` applied to the newest state: a conditional write, read again while another
        invocation wrote in between (an operator's command never erases a tick's claim)."""
        for _ in range(STATE_WRITE_TRIES):
            st, version = self.state.load_versioned()
            change(st)
            try:
                self.state.save_if(st, version)
                return
            except StateConflict:
                continue
        raise ControlPlaneError("the control plane's state kept changing while it was written; try again")

    def _datums(self, view: JobView, decision: Decision) -> list[Datum]:
        dims = {"JobName": self.s.job_name}
        out = [
            datum(M.DESIRED_WORKERS, decision.desired_workers, dims),
            datum(M.JOB_RUNNING, 1 if view.state in ACTIVE else 0, dims),
        ]
        if view.workers is not None:
            out.append(datum(M.CURRENT_WORKERS, view.workers, dims))
        if decision.action == "restart":
            out.append(datum(M.JOB_RESTARTS, 1, dims))
        out.append(datum(M.RESTARTS_EXHAUSTED, 1 if decision.action == "alarm" else 0, dims))
        return out


def _acted_since(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Another invocation changed what a decision rests on: the pause, the size, or it acted."""
    seen = before.get("decisions", [])
    return (
        after.get("paused") != before.get("paused")
        or after.get("desired_workers") != before.get("desired_workers")
        or any(d.get("action") in ACTING for d in after.get("decisions", []) if d not in seen)
    )


def _view_json(view: JobView) -> dict[str, Any]:
    return {
        "state": view.state,
        "workers": view.workers,
        "started_at": view.started_at.isoformat() if view.started_at else None,
        "consecutive_failures": view.consecutive_failures,
        "paused": view.paused,
        "desired_workers": view.desired_workers,
    }
