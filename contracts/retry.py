"""The one retry policy: exponential back-off with full jitter, through tenacity.

Where a call may fail for a while (a catalog that throttles or refuses, a concurrent commit), it
is retried by :func:`retrying`: waits that double from ``first_s`` up to ``max_s``, each drawn at
random below its cap (AWS's "full jitter", so that runs retrying together spread out), for at most
``attempts`` attempts (None: until it succeeds or the caller gives up). AWS SDK clients already
retry their own throttling and 5xx errors (botocore's standard mode); nothing wraps them again.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_never,
    wait_random_exponential,
)


def retrying(
    *,
    retry_on: Callable[[BaseException], bool],
    first_s: float = 1.0,
    max_s: float = 300.0,
    attempts: int | None = None,
    before_sleep: Callable[[RetryCallState], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Retrying:
    """A tenacity ``Retrying`` with the project's policy; errors ``retry_on`` refuses are raised at once."""
    return Retrying(
        retry=retry_if_exception(retry_on),
        wait=wait_random_exponential(multiplier=first_s, max=max_s),
        stop=stop_never if attempts is None else stop_after_attempt(attempts),
        before_sleep=before_sleep,
        sleep=sleep,
        reraise=True,
    )


def backoff_s(tries: int, *, first_s: float = 1.0, max_s: float = 300.0) -> float:
    """The policy's wait after ``tries`` failed tries (0: before the first retry), for a caller that
    schedules its own retries (across batches, say) rather than looping in :func:`retrying`."""
    state = RetryCallState(None, None, (), {})  # type: ignore[arg-type]  # the wait reads attempt_number only
    state.attempt_number = tries + 1
    return float(wait_random_exponential(multiplier=first_s, max=max_s)(state))
