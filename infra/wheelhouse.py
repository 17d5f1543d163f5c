"""The job's Python dependencies as one locked wheelhouse: every start installs offline, the same bytes.

Naming packages in ``--additional-python-modules`` makes Glue run pip against PyPI at every start,
scale and maintenance restart, resolving the transitive dependencies anew: a new release of one of
them can break a restart, and a job in a VPC without a NAT cannot start at all. Instead:

- ``infra/wheelhouse.lock`` (``python -m infra.wheelhouse lock``, committed) holds the job's
  dependencies (pyproject's ``glue`` extra) with their whole closure, resolved once for Glue's
  platform (manylinux x86_64, CPython 3.11) under the modules the oldest supported Glue version
  provides, less what every supported version provides: a wheel file name and its sha256 each.
- ``make package`` downloads exactly those files (hashes checked) into ``dist/wheelhouse/``; ``make
  deploy`` uploads them under a prefix named by the lock's digest (``JobWheelhousePrefix``).
- the job installs them as Glue installs wheels from S3 (``--additional-python-modules`` with each
  wheel's S3 path) with ``--python-modules-installer-option --no-index``: pip never reaches an index
  (AWS Glue Developer Guide, "Using Python libraries with AWS Glue": wheel files on S3, and the
  installer option passed to pip3). The parity environments install them the same way.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

from infra.runtime import LOCK, ROOT, Locked, glue_runtimes, job_python_modules, normalise, read_lock

# Glue 5's workers: x86-64 Amazon Linux 2023 (glibc 2.34), CPython 3.11
PLATFORM_ARGS = (
    "--only-binary=:all:",
    "--platform",
    "manylinux2014_x86_64",
    "--platform",
    "manylinux_2_28_x86_64",
    "--platform",
    "manylinux_2_34_x86_64",
    "--implementation",
    "cp",
    "--python-version",
    "3.11",
    "--abi",
    "cp311",
)
INSTALLER_OPTION = "--no-index"


def _download(target: Path, *requirements: str, constraints: Path | None = None, deps: bool = True) -> None:
    args = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", *PLATFORM_ARGS]
    args += ["-d", str(target), *(["-c", str(constraints)] if constraints else []), *([] if deps else ["--no-deps"])]
    out = subprocess.run([*args, *requirements], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"pip download {' '.join(requirements)} failed:\n{out.stdout}\n{out.stderr}")


def _dist(file: str) -> tuple[str, str]:
    name, version = file.split("-")[:2]
    return normalise(name), version


def resolve() -> list[Locked]:
    """The closure of the glue extra for Glue's platform, less what every Glue version provides."""
    runtimes = glue_runtimes().values()
    oldest = min(runtimes, key=lambda r: tuple(int(p) for p in r.version.split(".")))
    provided = set.intersection(*(set(r.provided) for r in runtimes))
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "wheels"
        _download(target, *job_python_modules(), constraints=oldest.requirements_file)
        entries = []
        for wheel in sorted(target.glob("*.whl")):
            name, version = _dist(wheel.name)
            if name not in provided:
                digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
                entries.append(Locked(name, version, wheel.name, digest))
    return entries


def write_lock(entries: list[Locked], path: Path = LOCK) -> None:
    header = "# python -m infra.wheelhouse lock: the job's wheels (see infra/wheelhouse.py). name version file sha256\n"
    path.write_text(header + "".join(f"{e.name} {e.version} {e.file} {e.sha256}\n" for e in entries))


def fetch(out: Path, entries: list[Locked] | None = None) -> list[Path]:
    """The locked wheels in ``out`` (downloaded once; every file checked against its hash)."""
    entries = read_lock() if entries is None else entries
    out.mkdir(parents=True, exist_ok=True)
    missing = [e for e in entries if not _verified(out / e.file, e)]
    if missing:
        _download(out, *(f"{e.name}=={e.version}" for e in missing), deps=False)
    for e in entries:
        if not _verified(out / e.file, e):
            raise SystemExit(f"wheelhouse: {e.file} missing or its sha256 differs from infra/wheelhouse.lock")
    wanted = {e.file for e in entries}
    for stray in out.glob("*.whl"):
        if stray.name not in wanted:
            stray.unlink()
    return [out / e.file for e in entries]


def _verified(path: Path, entry: Locked) -> bool:
    return path.exists() and hashlib.sha256(path.read_bytes()).hexdigest() == entry.sha256


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="wheelhouse", description=__doc__.splitlines()[0])
    p.add_argument("action", choices=["lock", "fetch"])
    p.add_argument("--out", type=Path, default=ROOT / "dist" / "wheelhouse")
    args = p.parse_args(argv)
    if args.action == "lock":
        entries = resolve()
        write_lock(entries)
        print(f"{LOCK.relative_to(ROOT)}: {len(entries)} wheels")
    else:
        for path in fetch(args.out):
            print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
