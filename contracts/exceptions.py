"""The project's exception hierarchy: one base class, small documented subclasses."""


class IngestError(Exception):
    """Base class of every error this project raises on purpose."""


class ConfigError(IngestError):
    """A setting is missing, unknown, of the wrong type or outside its allowed range."""


class ManifestError(IngestError):
    """A manifest is not valid JSON, fails its schema, or breaks an invariant."""


class StorageError(IngestError):
    """An object store (S3 or a local stand-in) call failed."""


class FencedOut(IngestError):
    """Another run of the job committed this batch first: this run must stop without publishing."""


class RowsLost(IngestError):
    """A batch's data files hold fewer (or more) rows than its tasks parsed: it is not committed."""
