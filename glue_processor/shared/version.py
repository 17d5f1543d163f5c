"""The object version an event named: read it, or say why it cannot be.

Shared by the parse task (:mod:`glue_processor.read.task`), which reads an object or one of its
byte ranges, and the driver's planning of those ranges (:mod:`glue_processor.plan.ranges`) and
text fingerprints (:mod:`glue_processor.read.fingerprint`), which read the first bytes of each: all
three must refuse the same versions for the same reasons.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import BinaryIO

from glue_processor.shared.objects import ObjectMissing, ObjectStore, VersionGone
from glue_processor.shared.spec import FileTask
from glue_processor.shared.text import read_from

REASON_MISSING = "object not found (deleted or never written)"
REASON_UNREADABLE = "object could not be read or decompressed (corrupt or truncated)"
REASON_SUPERSEDED = "object overwritten after its event (a newer eTag)"
REASON_VERSION_GONE = (
    "the event's version was overwritten before it was read (unversioned bucket); the newer version's own event "
    "loads that one"
)
# Clock slack between S3's Last-Modified and the event time of the same write.
OVERWRITE_TOLERANCE_S = 2.0


def overwritten(modified_epoch_s: float, event_time: datetime) -> bool:
    """True when the object was last modified after the event that listed it (clock slack allowed)."""
    return modified_epoch_s - event_time.timestamp() > OVERWRITE_TOLERANCE_S


class NotReadable(Exception):
    """The version an event named cannot be read: ``status`` is missing or superseded."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


@contextlib.contextmanager
def event_version(
    item: FileTask, stores: Callable[[str], ObjectStore], *, length: int | None = None
) -> Iterator[BinaryIO]:
    """The bytes of the object version ``item``'s event named, from where its range's reader starts
    (``length`` of them at most); :class:`NotReadable` when it is gone or was overwritten."""
    try:
        with stores(item.read_uri).open(
            item.read_uri, version_id=item.version_id, etag=item.etag, start=read_from(item.start), length=length
        ) as body:
            if not body.exact and overwritten(body.modified_epoch_s, item.event_time):
                # A newer version replaced the object after this event; that version's own event
                # brings it. Loading it here under this event's eTag would ingest it twice.
                raise NotReadable("superseded", REASON_SUPERSEDED)
            yield body.stream
    except ObjectMissing as exc:
        raise NotReadable("missing", REASON_MISSING if item.version_id is None else f"{REASON_MISSING}: {exc}") from exc
    except VersionGone as exc:
        raise NotReadable("superseded", REASON_VERSION_GONE) from exc


def byte_range(start: int, end: int | None) -> str:
    """How a quarantine record names one of the byte ranges an object was read in."""
    return f"bytes {start}-{'' if end is None else end} of the object (one of the ranges it was read in)"
