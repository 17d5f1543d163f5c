"""What ships, run the way it ships (issue: "Deployable as shipped").

The job's zip and script run in an environment like Glue 5's: only the modules that Glue version
provides (``infra/runtimes/glue-<v>.txt``, the list AWS publishes) plus the template's
``--additional-python-modules`` split on commas, as Glue splits it, and installed with pip. The
Lambda zip runs in an environment like the Lambda python3.11 runtime's (its boto3 1.34 only), the
zip first on sys.path as Lambda puts /var/task first, so the zip's own SDK is the one imported. Every
interpreter is started with ``-I``: nothing from this checkout or its editable install leaks in.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import subprocess
import tomllib
import zipfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from contracts.layout import manifest_key
from contracts.manifest import Manifest, ManifestEntry
from infra.build import render
from infra.package import build
from infra.parity import glue_env, lambda_env, lambda_prelude, local_native_wheel, local_wheelhouse
from infra.runtime import (
    DEFAULT_GLUE_VERSION,
    NATIVE_WHEEL_URI,
    ROOT,
    WHEELHOUSE_URI,
    extra,
    glue_runtimes,
    job_python_modules,
    lambda_runtime_pins,
    normalise,
    read_lock,
    split_as_glue_does,
)

STUB = Path(__file__).parent / "glue_stub"
TEMPLATE = render()
JOB_ARGS = TEMPLATE["Resources"]["GlueJob"]["Properties"]["DefaultArguments"]
EVENTS = ROOT / "tests" / "events"


def isolated(python: Path, code: str, *, env: dict[str, str] | None = None, timeout: int = 600) -> Any:
    """``python -I -c code``: no PYTHONPATH, no user site, no current directory on sys.path."""
    return subprocess.run(
        [str(python), "-I", "-c", code], capture_output=True, text=True, check=False, env=env, timeout=timeout
    )


# ---------------------------------------------------------------- pins (fast, no environment)


def test_additional_python_modules_are_the_locked_wheels_installed_offline() -> None:
    # Given the value the stack passes to Glue (CloudFormation substitutes the wheels' location)
    value = JOB_ARGS["--additional-python-modules"]["Fn::Sub"]
    # When Glue splits it on commas, each part is one wheel in S3: the locked wheelhouse, then the
    # native wheel (AWS Glue Developer Guide, "Using Python libraries with AWS Glue": wheels in S3 are
    # listed in this argument, and --python-modules-installer-option passes options to pip3)
    *wheels, native = split_as_glue_does(value)
    locked = read_lock()
    assert wheels == [f"{WHEELHOUSE_URI}/{e.file}" for e in locked]
    assert native == NATIVE_WHEEL_URI
    assert JOB_ARGS["--python-modules-installer-option"] == "--no-index"
    # And the lock holds every module of the glue extra, at its pinned version, each file a wheel
    versions = {e.name: e.version for e in locked}
    for part in job_python_modules():
        req = Requirement(part)
        assert req.specifier.contains(versions[normalise(req.name)]), part
    assert all(e.file.endswith(".whl") and len(e.sha256) == 64 for e in locked)


def template_modules(wheel: Path) -> str:
    """The template's ``--additional-python-modules`` with the native wheel at ``wheel`` and the
    locked wheelhouse where make package fetches it."""
    value: str = JOB_ARGS["--additional-python-modules"]["Fn::Sub"]
    assert value.count(NATIVE_WHEEL_URI) == 1
    return value.replace(NATIVE_WHEEL_URI, str(wheel)).replace(WHEELHOUSE_URI, str(local_wheelhouse()))


def test_local_pins_are_the_default_glue_versions_libraries() -> None:
    # pyspark, pyarrow and numpy as the stack's default GlueVersion provides them
    runtime = glue_runtimes()[DEFAULT_GLUE_VERSION]
    spark_extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["spark"]
    pins = {Requirement(r).name: str(Requirement(r).specifier) for r in spark_extra}
    assert pins["pyspark"] == f"=={runtime.spark}"
    assert pins["pyarrow"] == f"=={runtime.provided['pyarrow']}"
    assert pins["numpy"] == f"=={runtime.provided['numpy']}"
    assert render()["Parameters"]["GlueVersion"]["Default"] == DEFAULT_GLUE_VERSION


# ---------------------------------------------------------------- the job, on Glue-like environments


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="module", params=sorted(glue_runtimes()))
def glue_python(request: pytest.FixtureRequest) -> Path:
    """An environment like the Glue version's, with the template's modules installed as Glue does."""
    return glue_env(request.param, modules=template_modules(local_native_wheel()))


@pytest.mark.slow
def test_the_native_wheel_tested_here_is_the_one_that_ships(artifacts: dict[str, Path]) -> None:
    # the parity environments install .parity/wheels/; make deploy uploads make package's: same bytes
    assert artifacts["job_native_wheel"].name == local_native_wheel().name
    assert artifacts["job_native_wheel"].read_bytes() == local_native_wheel().read_bytes()


def zip_modules(path: Path) -> list[str]:
    names = zipfile.ZipFile(path).namelist()
    return sorted(n[:-3].replace("/", ".").removesuffix(".__init__") for n in names if n.endswith(".py"))


@pytest.mark.slow
def test_every_module_of_the_job_zip_imports_on_glue(glue_python: Path, artifacts: dict[str, Path]) -> None:
    # Given the job's zip and nothing else of this checkout
    modules = zip_modules(artifacts["job_package"])
    assert "glue_processor.batch" in modules and "glue_processor.session" in modules
    code = (
        "import importlib, sys, traceback\n"
        f"sys.path.insert(0, {str(artifacts['job_package'])!r})\n"
        "bad = []\n"
        f"for name in {modules!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as exc:\n"
        "        bad.append(f'{name}: {exc!r}')\n"
        "print('\\n'.join(bad)); sys.exit(1 if bad else 0)\n"
    )
    # When every module is imported on the Glue-like interpreter
    out = isolated(glue_python, code)
    # Then none fails (a local-only import, a pin that needs another numpy, ...)
    assert out.returncode == 0, out.stdout + out.stderr


def _resolve(value: Any) -> str:
    """A template value as CloudFormation would pass it with the parameters' defaults."""
    if isinstance(value, str):
        return value
    if "Ref" in value:
        return str(TEMPLATE["Parameters"][value["Ref"]]["Default"])
    if "Fn::If" in value:
        return _resolve(value["Fn::If"][2])  # the default parameters take the "else" branch here
    return "s3://unused/x"  # Fn::Sub of resource names: locations Glue uses, not the job


def _glue_argv(tmp: Path, zip_path: Path) -> list[str]:
    """The argv Glue gives the script: its own ids first, then every default argument of the
    rendered job, our locations pointed at local directories."""
    local = {
        "--manifest_uri": (tmp / "manifests").as_uri(),
        "--output_uri": (tmp / "out" / "data").as_uri(),
        "--quarantine_uri": (tmp / "out" / "quarantine").as_uri(),
        "--checkpoint_uri": (tmp / "checkpoint").as_uri(),
        "--manifest_archive_uri": (tmp / "archive").as_uri(),
        "--allowed_buckets": "landing",
        "--extra-py-files": str(zip_path),
        "--key_index": f"sqlite:///{tmp / 'key-index.db'}",  # the stack's DynamoDB table, locally
    }
    argv = ["--JOB_ID", "j_0123", "--JOB_RUN_ID", "jr_0123", "--job-bookmark-option", "job-bookmark-disable"]
    for key, value in JOB_ARGS.items():
        if isinstance(value, dict) and "Fn::If" in value and value["Fn::If"][2] == {"Ref": "AWS::NoValue"}:
            continue  # an optional argument, absent with the default parameters
        if key in local:
            argv += [key, local[key]]
        else:
            argv += [key, _resolve(value)]
    argv += ["--JOB_NAME", "ndjson-ingest-streaming"]  # not first: Glue promises no order
    argv += ["--trigger", "available-now", "--metrics_sinks", "jsonl"]
    argv += ["--metrics_jsonl_path", str(tmp / "metrics.jsonl")]
    argv += ["--source_uri_template", (tmp / "buckets").as_uri() + "/{bucket}/{key}"]
    return argv


@pytest.mark.slow
def test_the_job_script_runs_a_batch_from_the_zip(
    glue_python: Path, artifacts: dict[str, Path], tmp_path: Path
) -> None:
    from glue_processor.local.java import java_home

    # Given one landed object (two good lines, one bad) and its manifest
    body = b'{"id":1,"name":"a"}\nnot json\n{"id":2,"name":"b"}\n'
    obj = tmp_path / "buckets" / "landing" / "incoming" / "a.ndjson"
    obj.parent.mkdir(parents=True)
    obj.write_bytes(body)
    entry = ManifestEntry(
        bucket="landing",
        key="incoming/a.ndjson",
        size=len(body),
        etag=hashlib.md5(body).hexdigest(),
        event_time=datetime.now(UTC),
    )
    manifest = Manifest.of([entry])
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / manifest_key("", manifest)).write_bytes(manifest.to_json())
    script = artifacts["job_script"]
    bootstrap = (
        "import runpy, sys\n"
        f"sys.path[:0] = [{str(artifacts['job_package'])!r}, {str(STUB)!r}]\n"
        f"sys.argv = {[str(script), *_glue_argv(tmp_path, artifacts['job_package'])]!r}\n"
        f"runpy.run_path({str(script)!r}, run_name='__main__')\n"
    )
    # The Glue Data Catalog (the template's --catalog glue): moto's server on loopback, with the
    # stack's database; the job creates the Iceberg table in it.
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)  # the kernel's port, kept (see test_smoke)
    server.start()
    port = server.get_host_and_port()[1]
    endpoint = f"http://127.0.0.1:{port}"
    import urllib.request

    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"))
    creds = {"region_name": "us-east-1", "aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
    glue = boto3.client("glue", endpoint_url=endpoint, **creds)
    database = _resolve(JOB_ARGS["--database"])
    glue.create_database(DatabaseInput={"Name": database})
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "JAVA_HOME": java_home(),
        "PYSPARK_PYTHON": str(glue_python),
        # --extra-py-files reach the executors' Python workers as Glue ships them
        "PYSPARK_SUBMIT_ARGS": f"--py-files {artifacts['job_package']} --driver-memory 1g pyspark-shell",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_ENDPOINT_URL_GLUE": endpoint,
    }
    try:
        # When Glue would run the script: python script.py <argv>
        out = isolated(glue_python, bootstrap, env=env, timeout=900)
        # Then the job commits, and the rows and the bad line land where they should
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-6000:]
        assert "awsglue-stub: job.init ndjson-ingest-streaming" in out.stdout
        assert "awsglue-stub: job.commit" in out.stdout
        import pyarrow.parquet as pq

        from glue_processor.table.catalog import open_catalog
        from glue_processor.table.read import current_files, local_file

        table = open_catalog("glue", glue_client=glue).load_table((database, _resolve(JOB_ARGS["--table_name"])))
        files = [local_file(p) for p in current_files(table)]
        rows = [r for f in files for r in pq.ParquetFile(f).read().to_pylist()]
        assert sorted((r["id"], r["name"], r["_line"]) for r in rows) == [("1", "a", 1), ("2", "b", 3)]
        bad = [json.loads(line) for f in (tmp_path / "out" / "quarantine").rglob("*.json*") for line in f.open()]
        assert [(b["line"], b["kind"]) for b in bad] == [(2, "line")]
    finally:
        server.stop()


# ---------------------------------------------------------------- the Lambda zip, on the Lambda runtime


@contextlib.contextmanager
def _moto_s3(bucket: str) -> Iterator[tuple[str, Any]]:
    """moto's server on loopback with ``bucket``: its endpoint, and an S3 client of this interpreter."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)  # the kernel's port, kept (see test_smoke)
    server.start()
    port = server.get_host_and_port()[1]
    try:
        endpoint = f"http://127.0.0.1:{port}"
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing")  # fmt: skip
        s3.create_bucket(Bucket=bucket)
        yield endpoint, s3
    finally:
        server.stop()


@pytest.mark.slow
def test_lambda_zip_builds_a_manifest_on_the_lambda_runtime(artifacts: dict[str, Path], tmp_path: Path) -> None:
    # Given the Lambda zip unpacked as the runtime does, and S3 (moto's server on loopback)
    with zipfile.ZipFile(artifacts["lambdas"]) as zf:
        zf.extractall(tmp_path / "task")
    with _moto_s3("manifest-bucket") as (endpoint, s3):
        creds = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
        notification = json.loads((EVENTS / "s3_object_created.json").read_text())
        message = json.loads((EVENTS / "sqs_message.json").read_text())
        event = {"Records": [{**message, "body": json.dumps(notification)}]}
        code = (
            lambda_prelude(tmp_path / "task") + "import json\n"
            "from lambdas.manifest_builder.handler import lambda_handler\n"
            "class Context:\n"
            "    function_name = 'manifest-builder'; memory_limit_in_mb = 512; aws_request_id = 'r-1'\n"
            "    invoked_function_arn = 'arn:aws:lambda:us-east-1:123456789012:function:manifest-builder'\n"
            f"print(json.dumps(lambda_handler(json.loads({json.dumps(event)!r}), Context())))\n"
        )
        env = {
            **creds,
            "PATH": "/usr/bin:/bin",
            "AWS_ENDPOINT_URL": endpoint,
            "MANIFEST_BUCKET": "manifest-bucket",
            "POWERTOOLS_SERVICE_NAME": "manifest-builder",
            "POWERTOOLS_METRICS_NAMESPACE": "NdjsonIngest",
        }
        # When the handler runs on the Lambda-like interpreter
        out = isolated(lambda_env(), code, env=env, timeout=120)
        # Then no record failed and the manifest names the object
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        response = json.loads(out.stdout.strip().splitlines()[-1])
        assert response == {"batchItemFailures": []}
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket="manifest-bucket").get("Contents", [])]
        assert len(keys) == 1 and keys[0].startswith("manifests/")
        manifest = Manifest.from_json(s3.get_object(Bucket="manifest-bucket", Key=keys[0])["Body"].read())
        assert [e.key for e in manifest.entries] == ["incoming/2026/11/22/my file+1 ü 100%.json"]


@pytest.mark.slow
def test_the_control_plane_state_write_is_conditional_on_the_lambda_runtime(
    artifacts: dict[str, Path], tmp_path: Path
) -> None:
    """The state store adds the If-Match header when the request is signed (the runtime's boto3 1.34
    has no IfMatch parameter on PutObject), and S3 (moto's server) refuses a write over a state that
    changed since it was read (S3 User Guide, "Add preconditions to S3 operations with conditional
    requests"), on the SDK the zip carries."""
    with zipfile.ZipFile(artifacts["lambdas"]) as zf:
        zf.extractall(tmp_path / "task")
    with _moto_s3("state-bucket") as (endpoint, _):
        code = (
            lambda_prelude(tmp_path / "task") + "import json, boto3, botocore\n"
            "from lambdas.control_plane.state import S3StateStore, StateConflict\n"
            "store = S3StateStore(boto3.client('s3'), 'state-bucket', 'control-plane/state.json')\n"
            "out = {'botocore': botocore.__version__}\n"
            "st, v = store.load_versioned()\n"
            "store.save_if({**st, 'desired_workers': 3}, v)\n"
            "st, v = store.load_versioned()\n"
            "store.save({**st, 'desired_workers': 5})\n"
            "try:\n"
            "    store.save_if({**st, 'desired_workers': 6}, v)\n"
            "    out['stale'] = 'written'\n"
            "except StateConflict:\n"
            "    out['stale'] = 'refused'\n"
            "try:\n"
            "    store.save_if({**st, 'desired_workers': 7}, None)\n"
            "    out['first'] = 'written'\n"
            "except StateConflict:\n"
            "    out['first'] = 'refused'\n"
            "out['desired'] = store.load()['desired_workers']\n"
            "print(json.dumps(out))\n"
        )
        env = {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "PATH": "/usr/bin:/bin",
            "AWS_ENDPOINT_URL": endpoint,
        }
        out = isolated(lambda_env(), code, env=env, timeout=120)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        result = json.loads(out.stdout.strip().splitlines()[-1])
        assert result == {"botocore": shipped_sdk()["botocore"], "stale": "refused", "first": "refused", "desired": 5}


def shipped_sdk() -> dict[str, str]:
    """boto3 and botocore as pyproject's lambda extra pins them (what the zip carries)."""
    reqs = [Requirement(r) for r in extra("lambda")]
    return {r.name: str(r.specifier).removeprefix("==") for r in reqs if r.name in ("boto3", "botocore")}


@pytest.mark.slow
def test_the_lambda_zip_carries_the_sdk_the_tests_run(artifacts: dict[str, Path], tmp_path: Path) -> None:
    # Given the zip unpacked as Lambda unpacks it, on an interpreter holding the runtime's older SDK
    with zipfile.ZipFile(artifacts["lambdas"]) as zf:
        zf.extractall(tmp_path / "task")
    probe = (
        "import json, boto3, botocore; print(json.dumps([boto3.__version__, botocore.__version__, botocore.__file__]))"
    )
    # When the SDK is imported with the zip first on sys.path (as Lambda searches /var/task first: AWS
    # Lambda Developer Guide, "Working with .zip file archives for Python Lambda functions")
    out = isolated(lambda_env(), lambda_prelude(tmp_path / "task") + probe)
    assert out.returncode == 0, out.stderr
    boto3_version, botocore_version, where = json.loads(out.stdout)
    # Then it is the zip's, the version the tests run (pyproject pins it in lambda and dev)
    assert {"boto3": boto3_version, "botocore": botocore_version} == shipped_sdk()
    assert where.startswith(str(tmp_path / "task"))
    # and without the zip, the runtime's own (what a zip without its SDK would have run on)
    bare = json.loads(isolated(lambda_env(), probe).stdout)
    assert bare[1] == lambda_runtime_pins()["botocore"] != botocore_version
