"""Publishing a committed batch so that no cause can wedge the stream.

After its commit record (the fence) a batch must become visible in the table. Publication can
fail for two kinds of reasons, and they are handled differently:

- **The environment** (the catalog throttles, is down, is not reachable, denies access; another
  writer committed first): the batch is retried with exponential back-off and jitter
  (:mod:`contracts.retry`, capped at ``max_wait_s`` between attempts) for as long as it takes. The
  stream waits on that batch (nothing after it is lost, nothing is skipped), every failed attempt
  counts one ``PublishFailures`` (which alarms) and logs its cause, and the batch is published as
  soon as the cause is fixed.
- **The batch's own content** (the catalog refuses the request itself: an invalid or too large
  schema change): retrying cannot help. After ``max_batch_attempts`` such refusals (counted across
  restarts) the batch is *poison*: its manifests are quarantined with the cause, its files are
  removed, the commit record is marked abandoned (a replay skips it, the dedupe index forgets its
  objects, so a requeue loads them again), and the stream moves on.

Schema changes are validated before the commit record is written (``Sink.check``), so the second
kind is rare; it is there for what only the catalog knows.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

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
    if isinstance(exc, CommitFailedException | CommitStateUnknownException | BotoCoreError | OSError | TimeoutError):
        return False
    for cause in _chain(exc):
        if isinstance(cause, ClientError):
            return cause.response.get("Error", {}).get("Code", "") in REFUSAL_CODES
    return False


def _chain(exc: BaseException) -> list[BaseException]:
    out, seen = [], set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        out.append(current)
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return out


@dataclass
class Publication:
    """One committed batch's publication, retried by the policy of the module docstring.

    ``publish`` makes the batch visible (idempotent); ``failed`` is told each failed attempt (to
    count ``PublishFailures``, and, for a refusal, to persist the count: it returns the refusals so
    far); ``abandon`` quarantines a poison batch."""

    publish: Callable[[], int | None]
    failed: Callable[[BaseException, bool], int]
    abandon: Callable[[BaseException], None]
    max_refusals: int
    first_wait_s: float = 1.0
    max_wait_s: float = 300.0
    sleep: Callable[[float], None] | None = None

    def __call__(self) -> tuple[int | None, bool]:
        """(the snapshot id, or None; True when the batch was published, False when abandoned)."""
        state: dict[str, BaseException] = {}

        def keep_trying(exc: BaseException) -> bool:
            if not isinstance(exc, Exception):  # the process is going down (SystemExit, a signal): stop
                return False
            content = refused(exc)
            count = self.failed(exc, content)
            if content and count >= self.max_refusals:
                state["poison"] = exc
                return False
            return True

        def log(retry: RetryCallState) -> None:
            exc = retry.outcome.exception() if retry.outcome else None
            logger.warning(
                "publication failed; retrying",
                extra={"attempt": retry.attempt_number, "wait_s": round(retry.upcoming_sleep, 1), "error": repr(exc)},
            )

        policy = retrying(
            retry_on=keep_trying,
            first_s=self.first_wait_s,
            max_s=self.max_wait_s,
            before_sleep=log,
            sleep=self.sleep or time.sleep,
        )
        try:
            return policy(self.publish), True
        except Exception as exc:
            if state.get("poison") is not exc:
                raise
            self.abandon(exc)
            return None, False
