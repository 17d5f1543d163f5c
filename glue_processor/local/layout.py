"""The local stand-ins for the buckets, under one WORKDIR."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

GLOB_CHARS = frozenset("[]{}*?\\")
LANDING_BUCKET = "local-landing"
MANIFEST_BUCKET = "local-manifests"
MANIFEST_PREFIX = "manifests/"


def local_uri(path: Path) -> str:
    """A file URI as Hadoop reads it: the path as it is (``Path.as_uri`` would percent-encode a
    space, which Hadoop then takes literally)."""
    return "file://" + str(path.resolve())


@dataclass(frozen=True)
class LocalLayout:
    """``<WORKDIR>/buckets/<bucket>/<key>`` for S3, plus output, quarantine and checkpoint."""

    workdir: Path

    @property
    def buckets(self) -> Path:
        return self.workdir / "buckets"

    @property
    def landing(self) -> Path:
        return self.buckets / LANDING_BUCKET

    @property
    def manifests(self) -> Path:
        return self.buckets / MANIFEST_BUCKET / MANIFEST_PREFIX

    @property
    def output(self) -> Path:
        return self.workdir / "output"

    @property
    def quarantine(self) -> Path:
        return self.workdir / "quarantine"

    @property
    def checkpoint(self) -> Path:
        return self.workdir / "checkpoint"

    @property
    def state(self) -> Path:
        return self.workdir / "state"

    @property
    def table_settings(self) -> Path:
        """The table settings make run keeps for the WORKDIR (format, partitioning, schema, ...)."""
        return self.state / "table.json"

    @property
    def sample(self) -> Path:
        return self.workdir / "sample"

    @property
    def metrics(self) -> Path:
        return self.workdir / "metrics.jsonl"

    def create(self) -> None:
        bad = sorted(GLOB_CHARS & set(str(self.workdir)))
        if bad:
            raise FileExistsError(f"WORKDIR {self.workdir} contains {''.join(bad)}: Spark reads paths as glob patterns")
        for path in (self.buckets, self.manifests, self.state):
            path.mkdir(parents=True, exist_ok=True)

    def link_landing(self, source: Path) -> None:
        """Point the landing bucket at the user's tree (no copy)."""
        source = source.resolve()
        if self.landing.is_symlink() and self.landing.resolve() == source:
            return
        if self.landing.is_symlink():
            self.landing.unlink()
        elif self.landing.exists():
            raise FileExistsError(f"{self.landing} exists and is not a link; remove it or pick another WORKDIR")
        self.landing.symlink_to(source, target_is_directory=True)
