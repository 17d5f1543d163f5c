"""Every request the Lambdas' code makes in the tests, checked against the SDK the Lambda zip ships.

moto and Stubber run on this venv's botocore, which validates each request against its own models; on AWS
the Lambdas run on the botocore Lambda imports: the zip's (infra/package.py), or the runtime's if the zip
carried none. A request the shipped SDK cannot make fails client-side there (ParamValidationError) and
nowhere here: botocore 1.34.131, the python3.11 runtime's, has no orphanFileDeletionConfiguration in
CreateTableOptimizer (its Glue model, service-2.json), and the control plane's optimizers were never
created on AWS while every test passed.

So every botocore client made in these tests reports each request (the ``before-parameter-build`` event:
the parameters the client validates next) made from the shipped code (a frame of ``lambdas.*`` or
``contracts.*`` on the stack: a test's own set-up calls are not the Lambdas'); tests/lambdas/conftest.py
sends a test's requests to a :class:`Validator` running in the Lambda-like environment with the zip first
on sys.path (tests/lambdas/sdk_worker.py), and fails the test on any the SDK found there would refuse.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import datetime
import decimal
import functools
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import botocore.session

WORKER = Path(__file__).with_name("sdk_worker.py")
SHIPPED = ("lambdas.", "contracts.")  # the modules the Lambda zip carries


@dataclass(frozen=True)
class Request:
    service: str  # botocore's service name (its data directory: s3, glue, cloudwatch, ...)
    operation: str  # the API's name (CreateTableOptimizer)
    params: Any  # encoded for the worker (see encode)
    where: str  # the shipped code's frame that made it: module:line


def encode(value: Any) -> Any:
    """``value`` as JSON, keeping what the validator checks: each value's type."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes | bytearray):
        return {"$bytes": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, datetime.datetime | datetime.date):
        return {"$datetime": value.isoformat()}
    if isinstance(value, decimal.Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, list | tuple):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        encoded = {str(k): encode(v) for k, v in value.items()}
        return {"$dict": encoded} if len(encoded) == 1 and next(iter(encoded)).startswith("$") else encoded
    if hasattr(value, "read"):
        return {"$stream": True}
    return {"$opaque": type(value).__name__}


_recordings: list[list[Request]] = []  # the innermost recording block's list last


def _caller() -> str | None:
    """The innermost frame of the shipped code on the stack, if the request comes from it."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name.startswith(SHIPPED):
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return None


def _record(params: dict[str, Any], model: Any, **_: Any) -> None:
    if not _recordings:
        return
    where = _caller()
    if where is not None:
        _recordings[-1].append(Request(model.service_model.service_name, model.name, encode(params), where))


def install() -> None:
    """Every botocore client made from now on (boto3's included) reports its requests to the recording."""
    original = botocore.session.Session.create_client
    if getattr(original, "_reports_requests", False):
        return

    @functools.wraps(original)
    def create_client(self: Any, *args: Any, **kwargs: Any) -> Any:
        client = original(self, *args, **kwargs)
        client.meta.events.register("before-parameter-build", _record, unique_id="tests-lambda-sdk-record")
        return client

    create_client._reports_requests = True  # type: ignore[attr-defined]
    botocore.session.Session.create_client = create_client  # type: ignore[method-assign]


@contextlib.contextmanager
def recording() -> Iterator[list[Request]]:
    """The requests the shipped code makes inside the block."""
    _recordings.append([])
    try:
        yield _recordings[-1]
    finally:
        _recordings.pop()


class Validator:
    """A worker on ``python`` that validates requests with the botocore found with ``task`` first on
    sys.path (``task`` None: the interpreter's own, e.g. the Lambda runtime's)."""

    def __init__(self, python: Path, task: Path | None) -> None:
        argv = [str(python), "-I", str(WORKER), *([str(task)] if task else [])]
        self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        hello = json.loads(self._readline())
        self.botocore_version: str = hello["botocore"]
        self.botocore_path: str = hello["path"]
        self._seen: dict[str, str | None] = {}
        atexit.register(self.close)

    def _readline(self) -> str:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the SDK check worker ended (exit {self._proc.poll()})")
        return line

    def error(self, service: str, operation: str, params: Any) -> str | None:
        """What the client would raise for this request (None: it would send it)."""
        line = json.dumps({"service": service, "operation": operation, "params": params}, sort_keys=True)
        if line not in self._seen:
            assert self._proc.stdin is not None
            self._proc.stdin.write(line + "\n")
            self._proc.stdin.flush()
            self._seen[line] = json.loads(self._readline())["error"]
        return self._seen[line]

    def refused(self, requests: list[Request]) -> list[str]:
        """Each request this SDK would refuse, with where it was made and why."""
        out = []
        for r in requests:
            error = self.error(r.service, r.operation, r.params)
            if error is not None:
                out.append(f"{r.service}.{r.operation} from {r.where}, on botocore {self.botocore_version}: {error}")
        return out

    def close(self) -> None:
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            self._proc.wait(timeout=30)


@functools.cache
def shipped() -> Validator:
    """The validator of the SDK the Lambdas run with: the zip as make package builds it, unpacked first on
    sys.path in the Lambda-like environment (built once, then again only when what it is built from changes)."""
    from infra.parity import lambda_env, lambda_task

    return Validator(lambda_env(), lambda_task())


@functools.cache
def runtime() -> Validator:
    """The validator of the Lambda python3.11 runtime's own SDK (infra/runtimes/lambda-python3.11.txt)."""
    from infra.parity import lambda_env

    return Validator(lambda_env(), None)
