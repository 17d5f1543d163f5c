"""Deletions as the manifest builder reads them: an ObjectRemoved event is a removed entry, a
lifecycle expiration never is (S3 User Guide, "Event notification types": expirations are
s3:LifecycleExpiration:*; "EventBridge event message structure": Object Deleted with reason
"Lifecycle Expiration")."""

from __future__ import annotations

import json

import pytest

from lambdas.manifest_builder.events import parse_body, to_entry


def _notification(event: str) -> str:
    record = {
        "eventVersion": "2.1",
        "eventSource": "aws:s3",
        "eventTime": "2026-11-27T00:00:00.000Z",
        "eventName": event,
        "s3": {"bucket": {"name": "landing"}, "object": {"key": "incoming/a.json", "sequencer": "0055AED6DCD90281E5"}},
    }
    return json.dumps({"Records": [record]})


def _eventbridge(reason: str) -> str:
    return json.dumps(
        {
            "version": "0",
            "id": "e",
            "detail-type": "Object Deleted",
            "source": "aws.s3",
            "account": "123456789012",
            "time": "2026-11-27T00:00:00Z",
            "region": "us-east-1",
            "resources": [],
            "detail": {
                "version": "0",
                "bucket": {"name": "landing"},
                "object": {"key": "incoming/a.json", "sequencer": "0055AED6DCD90281E5"},
                "reason": reason,
                "deletion-type": "Permanently Deleted",
            },
        }
    )


@pytest.mark.parametrize("event", ["ObjectRemoved:Delete", "ObjectRemoved:DeleteMarkerCreated"])
def test_a_delete_is_a_removed_entry_ordered_by_its_sequencer(event: str) -> None:
    (found,) = parse_body(_notification(event))
    entry = to_entry(found)
    assert (entry.key, entry.event, entry.size, entry.sequencer) == (
        "incoming/a.json",
        "removed",
        0,
        "0055AED6DCD90281E5",
    )
    assert entry.etag == "removed-0055AED6DCD90281E5"  # its identity: the deletion's own


@pytest.mark.parametrize("event", ["LifecycleExpiration:Delete", "LifecycleExpiration:DeleteMarkerCreated"])
def test_a_lifecycle_expiration_is_never_a_deletion(event: str) -> None:
    assert parse_body(_notification(event)) == []


def test_eventbridge_deletes_are_removed_entries_and_its_lifecycle_expirations_are_skipped() -> None:
    (found,) = parse_body(_eventbridge("DeleteObject"))
    assert to_entry(found).event == "removed"
    assert parse_body(_eventbridge("Lifecycle Expiration")) == []


def test_a_delete_marker_is_a_deletion_of_the_key_and_a_permanent_delete_names_its_version() -> None:
    # S3 User Guide, "Event notification types": DeleteMarkerCreated hides the key (the version id in
    # the event is the marker's own); Delete with a version id removes that version for good
    marker = json.loads(_notification("ObjectRemoved:DeleteMarkerCreated"))
    marker["Records"][0]["s3"]["object"]["versionId"] = "marker-version"
    (hidden,) = parse_body(json.dumps(marker))
    assert to_entry(hidden).version_id is None
    permanent = json.loads(_notification("ObjectRemoved:Delete"))
    permanent["Records"][0]["s3"]["object"]["versionId"] = "v1"
    (gone,) = parse_body(json.dumps(permanent))
    assert to_entry(gone).version_id == "v1"
    # EventBridge says the same in detail.deletion-type (S3 User Guide, "EventBridge event message structure")
    event = json.loads(_eventbridge("DeleteObject"))
    event["detail"]["object"]["version-id"] = "v1"
    (eb_gone,) = parse_body(json.dumps(event))
    assert to_entry(eb_gone).version_id == "v1"
    event["detail"]["deletion-type"] = "Delete Marker Created"
    (eb_hidden,) = parse_body(json.dumps(event))
    assert to_entry(eb_hidden).version_id is None
