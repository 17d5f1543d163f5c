"""The one aligned-table printer of every local report (`make run`, `make query`, the benches)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def aligned(headers: Sequence[Any], rows: Sequence[Sequence[Any]], *, left: int = 1, null: str = "") -> str:
    """Headers, a rule and rows in columns two spaces apart: the first ``left`` columns flush left,
    the others flush right (numbers); ``None`` prints as ``null``."""
    cells = [[str(h) for h in headers]] + [[null if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = [
        "  ".join(
            c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()
        for r in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def counted(n: int, noun: str) -> str:
    """``n`` and its noun, in the plural unless one: "1 file", "4 files", "19,200 rows"."""
    return f"{n:,} {noun}{'s' * (n != 1)}"
