"""The manifest Lambda's surge signal: one EventBridge event on the account's default bus, which the
template's rule delivers to the control plane as it is (lambdas/control_plane/surge.py).

The event says which manifest prefix to look at; the control plane counts the bytes itself from a
listing of it, so the signals of concurrent invocations need not add up to anything.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# "aws." sources are AWS's own; the rule matches these exactly (infra/template.yaml: ControlPlaneOnSurge)
SOURCE = "ndjson-ingest.manifest-builder"
DETAIL_TYPE = "Manifests written"


class SurgeDetail(BaseModel):
    """The event's detail. ``manifest_uri`` (``s3://bucket/prefix``) is what the stack's rule matches,
    so two stacks in one account never answer each other's signals."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    manifest_uri: str = Field(pattern=r"^s3://[^/]+/")
    bytes: int = Field(ge=0, description="data bytes the invocation's manifests reference")
    manifests: int = Field(ge=0)
    oldest: datetime | None = Field(
        default=None, description="the earliest event its manifests are named after (a lagging queue: hours ago)"
    )


def put_events_entry(detail: SurgeDetail) -> dict[str, Any]:
    """The PutEvents entry (default bus)."""
    return {"Source": SOURCE, "DetailType": DETAIL_TYPE, "Detail": json.dumps(detail.model_dump(mode="json"))}
