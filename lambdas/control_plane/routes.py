"""The tables the job creates itself, as the control plane learns them: the routing file's (read
once per object: its key carries its content's hash, so a new routing file is a new key) and the
load history."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from contracts.exceptions import ConfigError
from contracts.routing import read_routing
from lambdas.control_plane.exceptions import ControlPlaneError
from lambdas.control_plane.settings import ControlSettings


def job_tables(s: ControlSettings, s3: Any) -> list[str]:
    """The load history, the quarantine and every table of the routing file (the stack's own table
    included)."""
    tables = [t for t in (s.load_history_table, s.quarantine_table) if t]
    if s.routes_uri:
        tables += routed_tables(s3, s.routes_uri)
    return tables


def routed_tables(s3: Any, uri: str) -> list[str]:
    return list(_routed(s3, uri))


@lru_cache(maxsize=4)
def _routed(s3: Any, uri: str) -> tuple[str, ...]:
    try:
        return tuple(read_routing(s3, uri).tables)
    except ConfigError as exc:  # unreadable, or (make deploy validates it) a hand-edited object
        raise ControlPlaneError(f"reading the routing file: {exc}") from exc
