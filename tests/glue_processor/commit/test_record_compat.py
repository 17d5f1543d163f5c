"""A commit record read by the job version before: fields added since are left out at their default."""

from __future__ import annotations

import pytest
from pydantic import ConfigDict, ValidationError, create_model

from contracts.ledger import OMITTED_AT_ZERO, BatchStats


def _before() -> type[BatchStats]:
    """BatchStats as a job of the version before reads it: the same fields but those added since,
    and none it does not know (the record forbids them)."""
    fields = {
        name: (info.annotation, info) for name, info in BatchStats.model_fields.items() if name not in OMITTED_AT_ZERO
    }
    return create_model("BatchStatsBefore", __config__=ConfigDict(frozen=True, extra="forbid"), **fields)


def test_a_record_with_nothing_to_say_in_a_new_field_reads_in_the_version_before() -> None:
    # a job rolled back (a failed stack update, an operator's redeploy) reads the records written since
    stats = BatchStats(records_out=7, partitions=3)
    text = stats.model_dump_json()
    assert not any(name in text for name in OMITTED_AT_ZERO)
    assert _before().model_validate_json(text).records_out == 7
    assert BatchStats.model_validate_json(text) == stats


def test_a_record_that_has_something_to_say_keeps_it_and_the_version_before_names_it() -> None:
    stats = BatchStats(records_out=7, overflow_records=5, overflow_partitions=2)
    assert BatchStats.model_validate_json(stats.model_dump_json()) == stats
    with pytest.raises(ValidationError, match="overflow_records"):
        _before().model_validate_json(stats.model_dump_json())
