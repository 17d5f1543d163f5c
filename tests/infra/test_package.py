"""The built artifacts import in a clean interpreter (no site-packages, only the artifact)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from infra.deploy import main as deploy_main
from infra.package import build, pip_install

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build(tmp_path_factory.mktemp("dist"))


def clean_python(code: str, *paths: Path) -> subprocess.CompletedProcess[str]:
    """``python -S -I``: no site-packages, no user paths; only what we put on sys.path."""
    prelude = "import sys; sys.path[:0] = %r\n" % [str(p) for p in paths]
    return subprocess.run(
        [sys.executable, "-S", "-I", "-c", prelude + code], capture_output=True, text=True, check=False
    )


def test_lambda_zip_imports_both_handlers(artifacts: dict[str, Path], tmp_path: Path) -> None:
    with zipfile.ZipFile(artifacts["lambdas"]) as zf:
        zf.extractall(tmp_path / "lambda")  # what the Lambda runtime does
    boto = Path(__import__("boto3").__file__).parents[1]  # the runtime provides boto3
    out = clean_python(
        "import lambdas.manifest_builder.handler as m, lambdas.control_plane.handler as c\n"
        "print(m.lambda_handler.__name__, c.lambda_handler.__name__)",
        tmp_path / "lambda",
        boto,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["lambda_handler", "lambda_handler"]


def test_job_zip_and_wheel_import(artifacts: dict[str, Path], tmp_path: Path) -> None:
    with zipfile.ZipFile(artifacts["lambdas"]) as zf:
        zf.extractall(tmp_path / "deps")  # pydantic, as --additional-python-modules provides it on Glue
    names = zipfile.ZipFile(artifacts["job_package"]).namelist()
    assert "glue_processor/batch.py" in names and not any(n.startswith("glue_processor/local/") for n in names)
    code = (
        "from glue_processor.main import parse_settings\n"
        "s = parse_settings(['--JOB_NAME','j','--manifest_uri','s3://m/x','--output_uri','s3://o/d',"
        "'--quarantine_uri','s3://o/q','--checkpoint_uri','s3://a/c'])\nprint(s.target_file_mb)"
    )
    out = clean_python(code, artifacts["job_package"], tmp_path / "deps")  # imported from the zip itself
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "128"
    pip_install(tmp_path / "wheel", "--no-deps", str(artifacts["wheel"]))
    out = clean_python(
        "import contracts.manifest, lambdas.manifest_builder.service; print('ok')",
        tmp_path / "wheel",
        tmp_path / "deps",
        Path(__import__("boto3").__file__).parents[1],
    )
    assert out.returncode == 0, out.stderr


# Glue 5.0 and 5.1 run on Amazon Linux 2023 with glibc 2.34 (AWS Glue Developer Guide, "Using Python
# libraries with AWS Glue", the table of versions); Glue compiles no native code, so the wheel must
# run there as built.
GLUE_GLIBC = (2, 34)


def glibc_needs(so: bytes) -> set[tuple[int, ...]]:
    """The GLIBC_x.y symbol versions an ELF shared object requires."""
    import io

    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import GNUVerNeedSection

    needs = set()
    for section in ELFFile(io.BytesIO(so)).iter_sections():
        if isinstance(section, GNUVerNeedSection):
            for _, auxes in section.iter_versions():
                for aux in auxes:
                    if aux.name.startswith("GLIBC_") and aux.name[6:].replace(".", "").isdigit():
                        needs.add(tuple(int(p) for p in aux.name[6:].split(".")))
    return needs


def test_the_native_wheel_runs_on_glue_as_built(artifacts: dict[str, Path], tmp_path: Path) -> None:
    from packaging.utils import parse_wheel_filename

    wheel = artifacts["job_native_wheel"]
    # Given the wheel make package builds for --additional-python-modules
    name, _, _, tags = parse_wheel_filename(wheel.name)
    assert name == "ndjson-arrow"
    # Then it is for CPython 3.11 on x86-64 Linux with a glibc no newer than Glue 5's
    assert {(t.interpreter, t.abi) for t in tags} == {("cp311", "cp311")}
    for tag in tags:
        assert tag.platform.endswith("_x86_64") and tag.platform.startswith("manylinux")
    with zipfile.ZipFile(wheel) as zf:
        modules = sorted(n for n in zf.namelist() if n.endswith(".so"))
        needs = set().union(*(glibc_needs(zf.read(so)) for so in modules))
        assert not any(n.endswith(".c") for n in zf.namelist())
    assert [m.split("/")[-1].split(".")[0] for m in modules] == ["_scan", "_thrift"]
    assert needs and max(needs) <= GLUE_GLIBC, needs
    # And it installs and runs in a clean interpreter with nothing else: a scan, a footer
    pip_install(tmp_path / "native", "--no-deps", str(wheel))
    out = clean_python(
        "import ndjson_arrow\n"
        "from ndjson_arrow import _thrift\n"
        'new, cols, lines, rows, bad, extra, *_ = ndjson_arrow.scan(b\'{"a":"x"}\\nnope\\n\', [], 10)\n'
        "footer = _thrift.encode(_thrift.decode(b'\\x15\\x04\\x00'))\n"
        "print(new, rows, [b[:2] for b in bad], footer)",
        tmp_path / "native",
    )
    assert out.returncode == 0, out.stderr
    bad = __import__("ndjson_arrow").MALFORMED
    assert out.stdout.strip() == f"['a'] 1 [(2, {bad})] b'\\x15\\x04\\x00'"


def test_deploy_without_credentials_fails_clearly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert deploy_main(["deploy", "--region", "eu-west-1"]) == 2
    assert "no usable AWS credentials" in capsys.readouterr().err
