"""The manifest builder's configuration, validated once at cold start."""

from __future__ import annotations

from functools import cached_property
from typing import Annotated

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from contracts.exceptions import ConfigError
from contracts.layout import normalise_prefix
from contracts.metrics import DEFAULT_NAMESPACE
from contracts.object_filter import DEFAULT_SUFFIXES, ObjectFilter
from contracts.validation import describe

GIB = 1024**3


class BuilderSettings(BaseSettings):
    """Environment of the manifest Lambda (and of the local runner's feeder).

    ``MANIFEST_BUCKET`` is required; everything else has a production default.
    """

    model_config = SettingsConfigDict(frozen=True, extra="ignore", case_sensitive=False)

    manifest_bucket: str = Field(min_length=3, max_length=63, description="bucket the manifests go to")
    manifest_prefix: str = Field(default="manifests/", description="key prefix of the manifests")
    source_prefix: str = Field(
        default="", description="only keys starting with this string are accepted (a plain prefix, as S3 compares it)"
    )
    source_suffixes: Annotated[tuple[str, ...], NoDecode] = Field(
        default=DEFAULT_SUFFIXES,
        description="only keys ending with one of these are accepted (case-sensitive, as S3); '*' accepts every key",
    )
    max_manifest_bytes: int = Field(default=GIB, ge=1, description="upper bound of a manifest's total size")
    max_manifest_files: int = Field(default=1000, ge=1, le=100_000, description="upper bound of its files")
    metrics_namespace: str = Field(default=DEFAULT_NAMESPACE, description="CloudWatch namespace (EMF)")
    surge_bytes: int = Field(
        default=0,
        ge=0,
        description="an invocation whose manifests reference this many data bytes signals the control plane "
        "at once (contracts.surge; at most once per 30 s per container); 0: never",
    )

    @field_validator("source_suffixes", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("manifest_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        return normalise_prefix(value)

    @model_validator(mode="after")
    def _valid_filter(self) -> BuilderSettings:
        try:
            ObjectFilter(self.source_prefix, self.source_suffixes)
        except ValueError as exc:
            raise ValueError(f"source_suffixes: {exc}") from exc
        return self

    @cached_property
    def object_filter(self) -> ObjectFilter:
        return ObjectFilter(self.source_prefix, self.source_suffixes)

    def accepts(self, key: str) -> bool:
        """True when a (decoded) key is one the pipeline takes (see contracts.object_filter)."""
        return self.object_filter.admits(key)


def load_settings(**overrides: object) -> BuilderSettings:
    """Read the settings from the environment; raise :class:`ConfigError` naming what is wrong."""
    try:
        return BuilderSettings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = describe(exc, name=str.upper, root="settings")
        raise ConfigError(f"invalid manifest builder configuration: {problems}") from exc
