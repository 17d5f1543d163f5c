"""Each test of the Lambdas fails if its Lambda code made a request the SDK the Lambda zip ships would refuse
(tests/lambdas/sdk.py): the SDK the tests run and the one the Lambdas run may differ, the rule holds whatever
the zip carries."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from tests.lambdas import sdk

sdk.install()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    with sdk.recording() as requests:
        result = yield  # a test that fails fails as it is
    refused = sdk.shipped().refused(requests) if requests else []
    if refused:
        pytest.fail(
            "requests the Lambdas' SDK would refuse client-side (ParamValidationError):\n" + "\n".join(refused),
            pytrace=False,
        )
    return result
