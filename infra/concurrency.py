"""Check the stack's Lambda concurrency parameters against the account before deploying.

A reservation the account cannot grant makes Lambda reject the function and the first create
roll back; better to say so before CloudFormation starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from infra.exceptions import DeployError

RESERVED = ("ManifestLambdaReservedConcurrency", "ControlPlaneReservedConcurrency")
MAX_CONCURRENCY = "ManifestLambdaMaxConcurrency"
# the function the SQS event source's MaximumConcurrency starts
SQS_RESERVED = "ManifestLambdaReservedConcurrency"
# "You can reserve up to the Unreserved account concurrency value that is shown, minus 100 for
# functions that don't have reserved concurrency." -- AWS Lambda Developer Guide, "Configuring
# reserved concurrency for a function",
# https://docs.aws.amazon.com/lambda/latest/dg/configuration-concurrency.html
UNRESERVED_MINIMUM = 100


def check(lambda_client: Any, values: Mapping[str, str], previous: Mapping[str, str]) -> None:
    """Raise :class:`DeployError` naming the parameter and the account's numbers when the
    requested reservations or the event source mapping's MaximumConcurrency cannot be granted.

    ``values`` are the parameters as they will be after the deploy, ``previous`` the stack's
    current ones: this stack's own current reservations come back to the pool on an update.
    """
    _throttles_its_event_source(values)
    try:
        settings = lambda_client.get_account_settings()
    except (ClientError, BotoCoreError) as exc:
        raise DeployError(f"lambda get_account_settings failed: {exc}") from exc
    limit = int(settings["AccountLimit"]["ConcurrentExecutions"])
    unreserved = int(settings["AccountLimit"]["UnreservedConcurrentExecutions"])
    ours_now = sum(_int(previous, name) for name in RESERVED)
    available = unreserved + ours_now - UNRESERVED_MINIMUM
    wanted = {name: _int(values, name) for name in RESERVED}
    if sum(wanted.values()) > max(0, available):
        asked = ", ".join(f"{k}={v}" for k, v in wanted.items() if v)
        raise DeployError(
            f"{asked} reserves {sum(wanted.values())} concurrent executions, but this account has "
            f"ConcurrentExecutions={limit} and UnreservedConcurrentExecutions={unreserved} "
            f"(+{ours_now} reserved by this stack now), and Lambda keeps at least {UNRESERVED_MINIMUM} unreserved: "
            f"at most {max(0, available)} can be reserved. Pass --param <name>=0 (unreserved) or ask for a "
            "higher Lambda concurrency quota"
        )
    max_concurrency = _int(values, MAX_CONCURRENCY)
    if max_concurrency > limit:
        raise DeployError(
            f"{MAX_CONCURRENCY}={max_concurrency} is above this account's Lambda concurrency limit "
            f"ConcurrentExecutions={limit}; pass --param {MAX_CONCURRENCY}=<2..{limit}>"
        )


def _throttles_its_event_source(values: Mapping[str, str]) -> None:
    """A reservation below the event source's MaximumConcurrency throttles the function (Lambda
    Developer Guide, "Configuring maximum concurrency for Amazon SQS event sources": keep reserved
    concurrency at or above maximum concurrency), and a throttled message goes back to the queue
    with its receive counted, until the redrive policy's maxReceiveCount moves it to the
    dead-letter queue. CloudFormation rules compare no numbers, so this is refused here."""
    reserved, maximum = _int(values, SQS_RESERVED), _int(values, MAX_CONCURRENCY)
    if 0 < reserved < maximum:
        raise DeployError(
            f"{SQS_RESERVED}={reserved} is below {MAX_CONCURRENCY}={maximum}: Lambda would throttle the "
            "queue's deliveries and throttled messages reach the dead-letter queue; pass "
            f"{SQS_RESERVED}=0 (none reserved) or at least {maximum}, or a {MAX_CONCURRENCY} of at most {reserved}"
        )


def _int(values: Mapping[str, str], name: str) -> int:
    raw = values.get(name, "0") or "0"
    try:
        return int(raw)
    except ValueError as exc:
        raise DeployError(f"parameter {name}={raw!r} is not a whole number") from exc
