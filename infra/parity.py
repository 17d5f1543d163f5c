"""Environments like the ones the artifacts run in, for testing what ships the way it ships.

- ``glue_env("5.1")``: Python 3.11 with exactly the modules that Glue version provides
  (``infra/runtimes/glue-<v>.txt``, installed without their dependencies, as Glue's image holds
  them), then the job's ``--additional-python-modules`` value split the way Glue splits it and
  installed with pip on top, offline (``--no-index``, as the job's installer option says), as Glue
  does at job start: the locked wheelhouse (``.parity/wheelhouse/``) and the native wheel
  ``infra.package`` builds (``.parity/wheels/``), where the template names them in S3.
- ``lambda_env()``: Python 3.11 with only what the Lambda runtime provides (its boto3, older than
  ours); ``lambda_task()``: the Lambda zip unpacked, which code run there puts first on sys.path
  (:func:`lambda_prelude`), as Lambda puts /var/task before the runtime's libraries: what the
  Lambdas import, the AWS SDK included, is then what the zip carries, as on AWS.

Each environment is a venv under ``.parity/`` and is rebuilt when what it is built from changes.
``python -m infra.parity`` builds them all (``make parity``).
"""

from __future__ import annotations

import functools
import hashlib
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from infra.package import lambda_zip, native_wheel
from infra.runtime import ROOT, RUNTIMES, additional_python_modules, glue_runtimes, split_as_glue_does
from infra.wheelhouse import INSTALLER_OPTION, fetch

PARITY = ROOT / ".parity"


class ParityError(Exception):
    """An environment could not be built; the message carries pip's output."""


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _pip(venv: Path, *args: str) -> None:
    out = subprocess.run(
        [str(_python(venv)), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise ParityError(f"pip install {' '.join(args)} failed in {venv.name}:\n{out.stdout}\n{out.stderr}")


def _fresh(venv: Path, recipe: str) -> bool:
    """Create ``venv`` unless it exists and was built from the same recipe; True when (re)built."""
    stamp = venv / ".recipe"
    digest = hashlib.sha256(recipe.encode()).hexdigest()
    if stamp.exists() and stamp.read_text() == digest and _python(venv).exists():
        return False
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    return True


def _stamp(venv: Path, recipe: str) -> None:
    (venv / ".recipe").write_text(hashlib.sha256(recipe.encode()).hexdigest())


@functools.cache
def local_native_wheel(root: Path = PARITY) -> Path:
    """The native wheel as ``make package`` builds it (once per process)."""
    return native_wheel(root / "wheels")


@functools.cache
def local_wheelhouse(root: Path = PARITY) -> Path:
    """The job's locked wheels as ``make package`` fetches them (once per process)."""
    wheels = fetch(root / "wheelhouse")
    return wheels[0].parent if wheels else root / "wheelhouse"


def glue_env(version: str, *, modules: str | None = None, root: Path = PARITY) -> Path:
    """The interpreter of an environment like Glue ``version``'s with ``modules`` (default: the
    stack's ``--additional-python-modules``: the locked wheelhouse and the native wheel built here)
    installed as Glue installs them: pip on top of the provided modules, offline (``--no-index``)."""
    runtime = glue_runtimes()[version]
    if modules is None:
        modules = additional_python_modules(str(local_native_wheel(root)), str(local_wheelhouse(root)))
    value = modules
    venv = root / f"glue-{version}"
    # a local wheel is part of the recipe by its bytes: a changed parser rebuilds the environment
    files = [Path(m) for m in split_as_glue_does(value) if Path(m).is_file()]
    digests = "".join(f"\n{hashlib.sha256(f.read_bytes()).hexdigest()}" for f in files)
    recipe = runtime.requirements_file.read_text() + "\n--additional-python-modules " + value + digests
    if _fresh(venv, recipe):
        _pip(venv, "--no-deps", "-r", str(runtime.requirements_file))
        _pip(venv, INSTALLER_OPTION, *split_as_glue_does(value))
        _stamp(venv, recipe)
    return _python(venv)


def lambda_env(*, root: Path = PARITY) -> Path:
    """The interpreter of an environment like the Lambda python3.11 runtime's."""
    pins = RUNTIMES / "lambda-python3.11.txt"
    venv = root / "lambda-python3.11"
    recipe = pins.read_text()
    if _fresh(venv, recipe):
        _pip(venv, "--no-deps", "-r", str(pins))
        _stamp(venv, recipe)
    return _python(venv)


def lambda_task(*, root: Path = PARITY) -> Path:
    """The Lambda zip as ``make package`` builds it, unpacked as Lambda unpacks it into /var/task
    (again only when the zip's bytes change)."""
    path = lambda_zip(root / "lambda-zip", root / ".cache")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    task = root / "lambda-task"
    stamp = task / ".zip-sha256"
    if stamp.exists() and stamp.read_text() == digest:
        return task
    shutil.rmtree(task, ignore_errors=True)
    with zipfile.ZipFile(path) as zf:
        zf.extractall(task)
    stamp.write_text(digest)
    return task


def lambda_prelude(task: Path) -> str:
    """Python that puts ``task`` first on sys.path, as the Lambda runtime searches /var/task before
    its own libraries, so a library the zip carries wins over the runtime's copy (AWS Lambda Developer
    Guide, "Working with .zip file archives for Python Lambda functions", "Dependency search path and
    runtime-included libraries")."""
    return f"import sys\nsys.path.insert(0, {str(task)!r})\n"


def main() -> int:
    for version in glue_runtimes():
        print(f"glue {version}: {glue_env(version)}")
    print(f"lambda: {lambda_env()}, running {lambda_task()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
