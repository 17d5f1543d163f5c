"""One way to turn a pydantic ValidationError into a message that names each bad field."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import ValidationError


def describe(exc: ValidationError, *, name: Callable[[str], str] = str, root: str = "<root>") -> str:
    """``field: problem; other: problem``, each field shown through ``name`` (e.g. as an env var)."""
    parts = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"])
        parts.append(f"{name(field) if field else root}: {err['msg']}")
    return "; ".join(parts)
