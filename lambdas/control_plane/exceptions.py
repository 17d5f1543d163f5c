"""Errors of the control plane."""

from contracts.exceptions import IngestError


class ControlPlaneError(IngestError):
    """A Glue, CloudWatch or state-store call failed, or a command is invalid."""
