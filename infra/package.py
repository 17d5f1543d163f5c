"""Build the deployment artifacts into ``dist/``.

- ``lambdas.zip``: contracts + lambdas + their dependencies for the Lambda runtime (python3.11,
  x86_64); boto3 comes with the runtime. Both functions use it, with different handlers.
- ``glue-job.zip``: contracts + glue_processor, the job's ``--extra-py-files``, without what
  the job never imports: the local runner (``glue_processor/local/``) and the operators'
  reconcile tool (run from a workstation with the wheel). pydantic and msgspec come through
  ``--additional-python-modules``; tests/infra/test_shipped.py imports every module of this zip
  in an environment like Glue's and runs a batch from it.
- ``main.py``: the job script (Glue's ScriptLocation).
- the project wheel, for users who install the package elsewhere.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAMBDA_DEPS = ["pydantic>=2.7,<3", "pydantic-settings>=2.3,<3", "aws-lambda-powertools>=3.0,<4"]


# Paths (relative to the repository) that stay out of the job's zip.
JOB_ZIP_EXCLUDE = ("glue_processor/local/", "glue_processor/reconcile.py")


def _add_tree(zf: zipfile.ZipFile, package: str, *, exclude: tuple[str, ...] = ()) -> None:
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if any(rel.startswith(e) for e in exclude):
            continue
        info = zipfile.ZipInfo(rel, date_time=(2020, 1, 1, 0, 0, 0))  # reproducible bytes
        info.external_attr = 0o644 << 16
        zf.writestr(info, path.read_bytes(), compress_type=zipfile.ZIP_DEFLATED)


def pip_install(target: Path, *args: str) -> None:
    """``pip install --target``: packages into a directory of their own, not into this environment."""
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(target), *args], check=True)


def lambda_deps(cache: Path) -> Path:
    """Dependencies for the Lambda runtime, fetched once as manylinux wheels."""
    target = cache / "lambda-deps"
    stamp = target / ".done"
    if stamp.exists():
        return target
    shutil.rmtree(target, ignore_errors=True)
    pip_install(
        target,
        "--platform",
        "manylinux2014_x86_64",
        "--implementation",
        "cp",
        "--python-version",
        "3.11",
        "--only-binary=:all:",
        *LAMBDA_DEPS,
    )
    stamp.touch()
    return target


def build(out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    deps = lambda_deps(out / ".cache")
    lambdas_zip = out / "lambdas.zip"
    with zipfile.ZipFile(lambdas_zip, "w") as zf:
        _add_tree(zf, "contracts")
        _add_tree(zf, "lambdas")
        for path in sorted(deps.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.name != ".done":
                zf.write(path, path.relative_to(deps).as_posix())
    job_zip = out / "glue-job.zip"
    with zipfile.ZipFile(job_zip, "w") as zf:
        _add_tree(zf, "contracts")
        _add_tree(zf, "glue_processor", exclude=JOB_ZIP_EXCLUDE)
    script = out / "main.py"
    shutil.copyfile(ROOT / "glue_processor" / "main.py", script)
    for old in out.glob("*.whl"):
        old.unlink()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)], check=True)
    (wheel,) = out.glob("*.whl")
    return {"lambdas": lambdas_zip, "job_package": job_zip, "job_script": script, "wheel": wheel}


def content_key(path: Path, prefix: str = "artifacts") -> str:
    """An S3 key that changes when the content does, so CloudFormation sees code updates."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return f"{prefix}/{path.stem}-{digest}{path.suffix}"


def main() -> int:
    for name, path in build(ROOT / "dist").items():
        print(f"{name:12} {path.relative_to(ROOT)}  {path.stat().st_size / 1024:,.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
