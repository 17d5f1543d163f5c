"""One error style for every local command a user types (``make run``, ``query``, ``compact``, ...).

A mistake of the user's (a setting, a file, a WORKDIR, SQL) is one line on stderr naming what is
wrong and how to fix it, and exit code 2; no traceback unless ``DEBUG=1``. Anything else is a bug
and keeps its traceback.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from contracts.exceptions import IngestError

USAGE = 2  # the user's input is wrong: fix it and run again
LONGEST = 2000

# The make variable a user typed for each option of the local commands (and the job's own option
# names, which the shared settings' messages use): an error names what the user can change.
MAKE_NAMES = {
    "--data": "DATA",
    "--workdir": "WORKDIR",
    "--cores": "CORES",
    "--table-format": "TABLE_FORMAT",
    "--table_format": "TABLE_FORMAT",
    "--schema": "SCHEMA",
    "--partition-by": "PARTITION_BY",
    "--partition_by": "PARTITION_BY",
    "--routes": "ROUTES",
    "--format": "FORMAT",
    "--sql": "SQL",
    "--inventory": "INVENTORY",
    "--manifests": "MANIFESTS",
    "--database": "DATABASE",
    "--output": "OUTPUT",
    "--since": "SINCE",
    "--on-overwrite": "ON_OVERWRITE",
    "--on_overwrite": "ON_OVERWRITE",
    "--on-delete": "ON_DELETE",
    "--on_delete": "ON_DELETE",
}
_FLAG = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, sorted(MAKE_NAMES, key=len, reverse=True))) + r")(?![\w-])")


def as_typed(text: str) -> str:
    """``text`` with each option of the local commands named as its make variable."""
    return _FLAG.sub(lambda m: MAKE_NAMES[m[1]], text)


def user_path(text: str) -> Path:
    """A path option, ``~`` expanded: bash expands ``DATA=~/exports`` on a make command line, zsh (the
    macOS shell) does not, and the path was then a folder named ``~`` in the clone."""
    return Path(text).expanduser()


class Parser(argparse.ArgumentParser):
    """argparse, but a wrong option is one line naming its make variable (not the usage text)."""

    def error(self, message: str) -> NoReturn:
        from contracts.exceptions import ConfigError

        message = re.sub(r"^argument ([-\w/]+)(?:/[-\w]+)*: ", lambda m: f"{m[1]}: ", message)
        raise ConfigError(as_typed(message) + f" (make help lists the variables; {self.prog} --help the options)")


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
        except BrokenPipeError:  # `make metrics | head`: the reader had enough; say nothing more
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        except IngestError as exc:
            if debug():
                raise
            print(f"error: {as_typed(say(exc))}", file=sys.stderr)
            return USAGE

    return wrapped
