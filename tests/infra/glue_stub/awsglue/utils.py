"""``getResolvedOptions`` with Glue's argument semantics (see the package docstring)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

RESERVED = ("--JOB_ID", "--JOB_RUN_ID", "--SECURITY_CONFIGURATION", "--TempDir", "--RedshiftTempDir")
BOOKMARK = ("job-bookmark-enable", "job-bookmark-disable", "job-bookmark-pause")


class GlueArgumentError(Exception):
    """Raised instead of exiting, as Glue's parser does."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise GlueArgumentError(message)


def getResolvedOptions(args: Sequence[str], options: Sequence[str]) -> dict[str, object]:
    parser = _Parser()
    parser.add_argument("--job-bookmark-option", choices=BOOKMARK, required=False)
    for option in RESERVED:
        if option[2:] in options:
            raise RuntimeError(f"Using reserved arguments {option}")
        parser.add_argument(option, required=False)
    for option in options:
        parser.add_argument("--" + option, required=True)
    parsed, _unknown = parser.parse_known_args(list(args[1:]))
    resolved = vars(parsed)
    resolved["job_bookmark_option"] = resolved.get("job_bookmark_option") or "job-bookmark-disable"
    return resolved
