"""One error style for every local command a user types (``make run``, ``query``, ``compact``, ...).

A mistake of the user's (a setting, a file, a WORKDIR, SQL) is one line on stderr naming what is
wrong and how to fix it, and exit code 2; no traceback unless ``DEBUG=1``. Anything else is a bug
and keeps its traceback.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable

from contracts.exceptions import IngestError

USAGE = 2  # the user's input is wrong: fix it and run again
LONGEST = 2000


def debug() -> bool:
    return os.environ.get("DEBUG", "") not in ("", "0")


def say(exc: BaseException) -> str:
    """The message a user reads: the error's text on one line (a multi-line repr folded)."""
    text = " ".join(line.strip() for line in str(exc).strip().splitlines() if line.strip()) or type(exc).__name__
    return text if len(text) <= LONGEST else text[:LONGEST] + "..."


def cli(main: Callable[..., int]) -> Callable[..., int]:
    """Wrap a command's ``main``: our errors become ``error: ...`` on stderr and exit code 2."""

    @functools.wraps(main)
    def wrapped(*args: object, **kwargs: object) -> int:
        try:
            return main(*args, **kwargs)
        except IngestError as exc:
            if debug():
                raise
            print(f"error: {say(exc)}", file=sys.stderr)
            return USAGE

    return wrapped
