"""What the artifacts run on: the Glue versions we support, their provided libraries, and the
modules the job installs on top (``--additional-python-modules``), each defined once.

- ``infra/runtimes/glue-<version>.txt``: the Python modules a Glue version provides, as AWS
  documents them (the file names its source); the template's ``GlueVersion`` allows exactly these.
- pyproject's ``glue`` extra: what the job installs on top, pinned with ``==`` only. Glue splits
  ``--additional-python-modules`` on every comma, so a requirement holding a comma (``>=2.7,<3``)
  would reach pip as two broken ones; :func:`additional_python_modules` refuses it.
- the parser's native core (``native/``), a manylinux wheel built by ``infra.package`` and named in
  the same argument by its S3 location (Glue installs wheels from S3 and compiles no native code:
  AWS Glue Developer Guide, "Using Python libraries with AWS Glue").
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from contracts.glue import STREAMING_WORKER_TYPES

ROOT = Path(__file__).resolve().parents[1]
RUNTIMES = ROOT / "infra" / "runtimes"
DEFAULT_GLUE_VERSION = "5.1"
__all__ = ["DEFAULT_GLUE_VERSION", "STREAMING_WORKER_TYPES", "GlueRuntime"]
_PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!-]+$")


@dataclass(frozen=True)
class GlueRuntime:
    version: str
    provided: dict[str, str]  # normalised distribution name -> version

    @property
    def spark(self) -> str:
        return self.provided["pyspark"]

    @property
    def requirements_file(self) -> Path:
        return RUNTIMES / f"glue-{self.version}.txt"


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: Path) -> dict[str, str]:
    """``name==version`` lines of a runtime file (comments and blank lines skipped)."""
    pins: dict[str, str] = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if not _PIN.match(line):
            raise ValueError(f"{path.name}: {line!r} is not an exact name==version pin")
        name, version = line.split("==")
        pins[normalise(name)] = version
    return pins


def glue_runtimes() -> dict[str, GlueRuntime]:
    """Every Glue version we support, by version string."""
    out = {}
    for path in sorted(RUNTIMES.glob("glue-*.txt")):
        version = path.stem.removeprefix("glue-")
        out[version] = GlueRuntime(version, read_pins(path))
    return out


def extra(name: str) -> tuple[str, ...]:
    """A pyproject optional-dependency list."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return tuple(project["optional-dependencies"][name])


def job_python_modules() -> tuple[str, ...]:
    """What the job installs on top of Glue's provided modules (pyproject's ``glue`` extra)."""
    modules = extra("glue")
    for req in modules:
        if "," in req or not _PIN.match(req):
            raise ValueError(
                f"glue extra: {req!r} must be an exact name==version pin without commas "
                "(Glue splits --additional-python-modules on every comma)"
            )
    return modules


# The job's locked wheelhouse (written by ``python -m infra.wheelhouse lock``): one wheel per line,
# ``name version file sha256``.
LOCK = ROOT / "infra" / "wheelhouse.lock"


@dataclass(frozen=True)
class Locked:
    name: str  # normalised distribution name
    version: str
    file: str
    sha256: str


def read_lock(path: Path = LOCK) -> list[Locked]:
    out = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            name, version, file, digest = line.split()
            out.append(Locked(name, version, file, digest))
    return out


def lock_digest(entries: list[Locked]) -> str:
    """Names the S3 prefix the wheels go under: another lock, another prefix (and a job restart)."""
    return hashlib.sha256("".join(f"{e.file}{e.sha256}" for e in entries).encode()).hexdigest()[:16]


# Where the template puts the native wheel and the locked wheelhouse: the deploy uploads them under
# keys that keep their file names (pip reads a wheel's tags from its name).
NATIVE_WHEEL_URI = "s3://${CodeBucket}/${JobNativeWheelKey}"
WHEELHOUSE_URI = "s3://${CodeBucket}/${JobWheelhousePrefix}"


def additional_python_modules(native_wheel: str, wheelhouse: str = WHEELHOUSE_URI) -> str:
    """The value of the job's ``--additional-python-modules`` argument: every wheel of the locked
    wheelhouse under ``wheelhouse``, and the native wheel at ``native_wheel`` (S3 URIs on AWS, local
    paths in the parity environments). Installed with ``--no-index`` (infra/wheelhouse.py)."""
    modules = [f"{wheelhouse}/{entry.file}" for entry in read_lock()] + [native_wheel]
    for module in modules:
        if "," in module:
            raise ValueError(f"{module!r}: Glue splits --additional-python-modules on every comma")
    return ",".join(modules)


def split_as_glue_does(value: str) -> list[str]:
    """How Glue reads ``--additional-python-modules``: a comma-separated list of modules
    (AWS Glue Developer Guide, "Using Python libraries with AWS Glue")."""
    return [part.strip() for part in value.split(",") if part.strip()]


def lambda_runtime_pins() -> dict[str, str]:
    """What the Lambda python3.11 runtime provides (the AWS SDK for Python)."""
    return read_pins(RUNTIMES / "lambda-python3.11.txt")
