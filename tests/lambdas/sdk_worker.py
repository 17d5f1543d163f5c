"""Checks AWS requests against the botocore that a Lambda would import, with botocore's own ParamValidator.

Run as ``python -I sdk_worker.py [TASK]`` on the Lambda-like interpreter (infra.parity.lambda_env): TASK, the
unpacked Lambda zip, goes first on sys.path as Lambda puts /var/task first, so ``import botocore`` finds what the
function would find on AWS (the zip's SDK, or the runtime's when the zip carries none). Standard library and
that botocore only: nothing of this checkout is importable here.

Protocol, one JSON object a line: it first writes ``{"botocore": version, "path": its __init__}``; then for each
``{"service", "operation", "params"}`` read (params encoded by tests/lambdas/sdk.py) it writes ``{"error": null}``
or ``{"error": "<what the client would raise>"}``: the client runs this same validation before sending, and
raises ParamValidationError on what it reports (botocore/client.py, ``_convert_to_request_dict``).
"""

from __future__ import annotations

import base64
import datetime
import decimal
import io
import json
import sys
from typing import Any


class Opaque:
    """A value the recorder could not carry over (no AWS shape accepts it)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __repr__(self) -> str:
        return f"<{self.kind}>"


def decode(value: Any) -> Any:
    if isinstance(value, list):
        return [decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        ((tag, inner),) = value.items()
        if tag == "$bytes":
            return base64.b64decode(inner)
        if tag == "$datetime":
            return datetime.datetime.fromisoformat(inner)
        if tag == "$decimal":
            return decimal.Decimal(inner)
        if tag == "$stream":
            return io.BytesIO(b"")
        if tag == "$opaque":
            return Opaque(inner)
        if tag == "$dict":
            return {k: decode(v) for k, v in inner.items()}
    return {k: decode(v) for k, v in value.items()}


def main() -> int:
    if len(sys.argv) > 1:
        sys.path.insert(0, sys.argv[1])
    import botocore
    import botocore.session
    from botocore.exceptions import UnknownServiceError
    from botocore.model import OperationNotFoundError
    from botocore.validate import ParamValidator

    session = botocore.session.get_session()
    validator = ParamValidator()
    models: dict[str, Any] = {}
    print(json.dumps({"botocore": botocore.__version__, "path": botocore.__file__}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        service, operation = request["service"], request["operation"]
        try:
            if service not in models:
                models[service] = session.get_service_model(service)
            shape = models[service].operation_model(operation).input_shape
        except UnknownServiceError:
            print(json.dumps({"error": f"botocore {botocore.__version__} has no service {service!r}"}), flush=True)
            continue
        except OperationNotFoundError:
            missing = f"botocore {botocore.__version__} has no operation {operation} in {service}"
            print(json.dumps({"error": missing}), flush=True)
            continue
        params = decode(request["params"])
        report = validator.validate(params, shape) if shape is not None else None
        error: str | None = report.generate_report() if report is not None and report.has_errors() else None
        if shape is None and params:
            error = f"{operation} takes no parameters in botocore {botocore.__version__}"
        print(json.dumps({"error": error}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
