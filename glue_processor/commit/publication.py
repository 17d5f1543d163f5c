"""Publishing a committed batch so that no cause can wedge the stream.

After its commit record (the fence) a batch must become visible in the table. Publication can
fail for two kinds of reasons, and they are handled differently:

- **The environment** (the catalog throttles, is down, is not reachable, denies access; another
  writer committed first): the table's share is retried with exponential back-off and jitter
  (:mod:`contracts.retry`, capped at ``max_wait_s`` between attempts). Every failed attempt counts
  one ``PublishFailures`` (which alarms) and logs its cause. After ``hold_s`` of waiting the share
  is *set aside* (:mod:`glue_processor.commit.deferred`): the batch's other tables and the next
  batches go on, and the share is tried again every batch until it is published (nothing is lost,
  nothing skipped; its table is behind until then). With no hold (``None``) it is retried for as
  long as it takes, the stream waiting on it.
- **The share's own content** (the catalog refuses the request itself: an invalid or too large
  schema change): retrying cannot help. After ``max_batch_attempts`` such refusals (counted across
  restarts) the share is *poison*: its objects are quarantined with the cause, its files removed, a
  marker says it is abandoned (a replay skips it, the dedupe index forgets its objects, so a requeue
  loads them again), and the other tables and the stream go on.

Schema changes are validated before the commit record is written (``Sink.check``; a share that
would be refused is quarantined then), so the second kind is rare; it is there for what only the
catalog knows. An error a library raises on the share's content (``ValueError``, ``TypeError``,
``KeyError``, ``ArithmeticError``, none of them from I/O) is of the second kind too: such an error
retried for as long as it takes wedged the stream (a key ``ingest_day``; a timestamp of year 0).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from botocore.exceptions import BotoCoreError, ClientError
from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
from tenacity import RetryCallState

from contracts.column_names import MAX_TABLE_COLUMNS, valid_column_name
from contracts.retry import retrying

logger = logging.getLogger(__name__)

# Error codes of AWS APIs that say the request itself is invalid: the same request fails again.
REFUSAL_CODES = frozenset(
    {
        "InvalidInputException",
        "ValidationException",
        "InvalidParameterException",
        "InvalidRequestException",
        "SerializationException",
        "EntityTooLarge",
        "RequestEntityTooLargeException",
    }
)


class PublishRefused(Exception):
    """The table refused the batch for its own content: publishing it again cannot succeed."""


# What passes with time (the network, the catalog's conflicts); and errors a library raises on the
# share's content, which cannot (never from I/O: a chain through one of TRANSIENT is waited out)
TRANSIENT = (CommitFailedException, CommitStateUnknownException, BotoCoreError, OSError, TimeoutError)
DETERMINISTIC = (ValueError, TypeError, KeyError, ArithmeticError)


def refuse_columns(names: list[str]) -> None:
    """Raise :class:`PublishRefused` for a column set the Glue Data Catalog would refuse (see
    :mod:`contracts.column_names`): a name it does not accept, or more columns than one UpdateTable
    request carries."""
    bad = [n for n in names if not valid_column_name(n)]
    if bad:
        raise PublishRefused(f"column names the catalog refuses: {bad[:5]!r}")
    if len(names) > MAX_TABLE_COLUMNS:
        raise PublishRefused(f"{len(names)} columns: more than one UpdateTable request carries ({MAX_TABLE_COLUMNS})")


def refused(exc: BaseException) -> bool:
    """True when ``exc`` says the batch's own content was refused (see the module docstring);
    False for what passes with time or an operator's fix (throttling, outages, access, conflicts)."""
    if isinstance(exc, PublishRefused):
        return True
    if isinstance(exc, TRANSIENT):
        return False
    chain = _chain(exc)
    for cause in chain:
        if isinstance(cause, ClientError):
            return cause.response.get("Error", {}).get("Code", "") in REFUSAL_CODES
    if any(isinstance(cause, TRANSIENT) for cause in chain):
        return False
    # a library validating the share (pyiceberg's ValueError on a schema or spec it will not take,
    # Arrow's on a file's metadata): the same share fails the same way however long it waits
    return isinstance(exc, DETERMINISTIC)


def _chain(exc: BaseException) -> list[BaseException]:
    out, seen = [], set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        out.append(current)
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return out


Settled = Literal["published", "abandoned", "deferred"]


@dataclass
class Publication:
    """One committed share's publication, retried by the policy of the module docstring.

    ``publish`` makes the share visible (idempotent); ``failed`` is told each failed attempt (to
    count ``PublishFailures``, and, for a refusal, to persist the count: it returns the refusals so
    far); ``abandon`` quarantines a poison share. ``hold_s``: the waiting after which a share that
    keeps failing is set aside (None: never); ``attempts``: at most this many (None: no limit; a
    share set aside is tried once per batch)."""

    publish: Callable[[], int | None]
    failed: Callable[[BaseException, bool], int]
    abandon: Callable[[BaseException], None]
    max_refusals: int
    first_wait_s: float = 1.0
    max_wait_s: float = 300.0
    sleep: Callable[[float], None] | None = None
    hold_s: float | None = None
    attempts: int | None = None

    def __call__(self) -> tuple[int | None, Settled]:
        """(the snapshot id or None, how it settled: published, abandoned, or deferred: set aside)."""
        state: dict[str, BaseException] = {}
        waited = [0.0, 0]  # seconds waited, attempts failed

        def keep_trying(exc: BaseException) -> bool:
            if not isinstance(exc, Exception):  # the process is going down (SystemExit, a signal): stop
                return False
            content = refused(exc)
            count = self.failed(exc, content)
            waited[1] += 1
            if content and count >= self.max_refusals:
                state["poison"] = exc
                return False
            out_of_time = self.hold_s is not None and waited[0] >= self.hold_s
            if out_of_time or (self.attempts is not None and waited[1] >= self.attempts):
                state["deferred"] = exc
                return False
            return True

        def wait(seconds: float) -> None:
            waited[0] += seconds
            (self.sleep or time.sleep)(seconds)

        def log(retry: RetryCallState) -> None:
            exc = retry.outcome.exception() if retry.outcome else None
            logger.warning(
                "publication failed; retrying",
                extra={"attempt": retry.attempt_number, "wait_s": round(retry.upcoming_sleep, 1), "error": repr(exc)},
            )

        policy = retrying(
            retry_on=keep_trying, first_s=self.first_wait_s, max_s=self.max_wait_s, before_sleep=log, sleep=wait
        )
        try:
            return policy(self.publish), "published"
        except Exception as exc:
            if state.get("deferred") is exc:
                return None, "deferred"
            if state.get("poison") is not exc:
                raise
            self.abandon(exc)
            return None, "abandoned"
