"""Errors of ``make deploy`` / ``make destroy``."""


class DeployError(Exception):
    """A deployment step failed; the message says which and why."""


class StackNotFound(DeployError):
    """The named stack does not exist."""
