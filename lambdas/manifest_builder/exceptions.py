"""Errors of the manifest builder."""

from contracts.exceptions import IngestError


class NotificationError(IngestError):
    """An SQS message body is not an S3 event notification we can read."""
