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
