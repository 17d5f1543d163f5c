"""Which landed objects the pipeline takes: defined once, for the stack's S3 notification (or
EventBridge rule), the manifest Lambda and reconcile.

A key is taken when it starts with the prefix, compared as a plain string (``incoming/app-`` takes
``incoming/app-1.json``: S3's notification filter compares it the same way), and ends with one of
the suffixes, compared as S3 compares them, case-sensitively. ``.gz`` takes every gzip object (a
Firehose GZIP delivery has no ``.json`` in its name). ``*`` as the only suffix takes every key
under the prefix, with a suffix or not.
"""

from __future__ import annotations

from dataclasses import dataclass

ANY_SUFFIX = "*"
DEFAULT_SUFFIXES: tuple[str, ...] = (".json", ".ndjson", ".jsonl", ".gz")


@dataclass(frozen=True)
class ObjectFilter:
    prefix: str = ""
    suffixes: tuple[str, ...] = DEFAULT_SUFFIXES

    def __post_init__(self) -> None:
        if not self.suffixes:
            raise ValueError("suffixes must list at least one suffix, or '*' for every key")
        if ANY_SUFFIX in self.suffixes and len(self.suffixes) > 1:
            raise ValueError("'*' takes every key: list it alone")
        for a in self.suffixes:
            for b in self.suffixes:
                if a != b and a.endswith(b):
                    # S3 refuses overlapping notification filters, and one would take the other's keys
                    raise ValueError(f"suffixes {a!r} and {b!r} overlap: keep {b!r}")

    @property
    def any_suffix(self) -> bool:
        return self.suffixes == (ANY_SUFFIX,)

    def admits(self, key: str) -> bool:
        """True when a (decoded) object key is one the pipeline takes."""
        return key.startswith(self.prefix) and (self.any_suffix or key.endswith(self.suffixes))

    def s3_filter_rules(self) -> list[list[dict[str, str]]]:
        """One S3 notification filter (its rules) per suffix; prefix only for '*'."""
        prefix = [{"Name": "prefix", "Value": self.prefix}] if self.prefix else []
        if self.any_suffix:
            return [prefix]
        return [[*prefix, {"Name": "suffix", "Value": s}] for s in self.suffixes]
