"""The surge signal: after an invocation that wrote much, tell the control plane at once
(``contracts.surge``) instead of leaving it to the next tick on CloudWatch datapoints a minute old."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger
from botocore.exceptions import BotoCoreError, ClientError

from contracts.surge import SurgeDetail, put_events_entry
from lambdas.manifest_builder.service import BuildResult

logger = Logger(service="manifest-builder", child=True)


class SurgeSignal:
    """Sends the signal for an invocation whose manifests reference ``threshold`` bytes or more (0:
    never), at most once per ``interval_s`` per container. The signal only hurries the control plane:
    a failure to send is logged and never fails the invocation (its manifests are written)."""

    def __init__(
        self,
        client: Any,
        *,
        manifest_uri: str,
        threshold: int,
        interval_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client, self.manifest_uri, self.threshold = client, manifest_uri, threshold
        self.interval_s, self.clock = interval_s, clock
        self._sent_at: float | None = None

    def after(self, result: BuildResult) -> bool:
        """Send the signal for this invocation if it is due; True when sent."""
        if self.threshold <= 0 or result.bytes < self.threshold:
            return False
        now = self.clock()
        if self._sent_at is not None and now - self._sent_at < self.interval_s:
            return False
        written = len(result.manifests_written)
        detail = SurgeDetail(
            manifest_uri=self.manifest_uri, bytes=result.bytes, manifests=written, oldest=result.oldest_event
        )
        try:
            out = self.client.put_events(Entries=[put_events_entry(detail)])
        except (ClientError, BotoCoreError) as exc:
            logger.warning("surge signal not sent", extra={"error": str(exc), "bytes": result.bytes})
            return False
        if out.get("FailedEntryCount"):
            logger.warning("surge signal refused", extra={"entries": out.get("Entries"), "bytes": result.bytes})
            return False
        self._sent_at = now
        logger.info("surge signal sent", extra={"bytes": result.bytes, "manifests": detail.manifests})
        return True
