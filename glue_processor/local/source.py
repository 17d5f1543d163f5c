"""What a WORKDIR is fed from, remembered: the user's tree (``DATA``) or the generated sample.

A WORKDIR holds one landing bucket. Fed from a tree once, ``make run`` without ``DATA`` feeds that
tree again; the sample is generated only in a WORKDIR of its own, never mixed into a user's table;
and the landing link is never repointed behind the user's back (another tree's keys would read as
new versions of these). ``<WORKDIR>/state/source.json`` keeps it; a WORKDIR from before that file
is read from its landing link.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from contracts.exceptions import ConfigError
from glue_processor.local.layout import LocalLayout


@dataclass(frozen=True)
class DataSource:
    path: Path
    sample: bool  # the generated sample (in <WORKDIR>/sample), not the user's tree


def remembered(layout: LocalLayout) -> DataSource | None:
    """The source this WORKDIR was fed from, if any."""
    record = _record(layout)
    if record.exists():
        item = json.loads(record.read_text(encoding="utf-8"))
        return DataSource(Path(item["path"]), bool(item["sample"]))
    if layout.landing.is_symlink():  # a WORKDIR of an earlier version: its link says
        target = Path(os.readlink(layout.landing))
        return DataSource(target, target.resolve() == layout.sample.resolve())
    return None


def choose(layout: LocalLayout, data: Path | None) -> DataSource:
    """The source of this run: ``data`` if given (and this WORKDIR's own, or new), else the one
    remembered, else the sample. A mistake is a :class:`ConfigError` naming the fix."""
    known = remembered(layout)
    workdir = layout.workdir
    if data is not None:
        check_data(data)
        wanted = DataSource(data.resolve(), sample=False)
        if known is None or (not known.sample and known.path.resolve() == wanted.path):
            return wanted
        if known.sample:
            raise ConfigError(
                f"WORKDIR={workdir} holds the generated sample; ingest your data in a WORKDIR of its own: "
                f"make run DATA={data} WORKDIR=<new dir>"
            )
        raise ConfigError(
            f"WORKDIR={workdir} is fed from {known.path}, not {data}: run make run DATA={known.path} "
            f"WORKDIR={workdir}, or give {data} a WORKDIR of its own"
        )
    if known is not None:
        return known
    return DataSource(layout.sample, sample=True)


def check_data(data: Path | None) -> None:
    """A ConfigError when ``data`` is given and is no folder (checked before a WORKDIR is made)."""
    if data is not None and not data.is_dir():
        raise ConfigError(f"DATA={data} is not a directory: give the folder that holds your .json/.ndjson files")


def remember(layout: LocalLayout, source: DataSource) -> None:
    record = _record(layout)
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"path": str(source.path), "sample": source.sample}), encoding="utf-8")


def _record(layout: LocalLayout) -> Path:
    return layout.state / "source.json"
