"""A commit record read by the job version before: fields added since are left out at 0 when the
ledger writes the record, so a job rolled back (a failed stack update, a redeploy of the previous
build) reads every record that has nothing to say in them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from contracts.ledger import OMITTED_AT_ZERO, BatchStats, CommitRecord, TableShare, record_json


def _before() -> type[BaseModel]:
    """BatchStats as the version before reads it: the same fields but those added since, and none it
    does not know (the record forbids them)."""
    fields: dict[str, Any] = {
        name: (info.annotation, info) for name, info in BatchStats.model_fields.items() if name not in OMITTED_AT_ZERO
    }
    return create_model("BatchStatsBefore", __config__=ConfigDict(frozen=True, extra="forbid"), **fields)


def _record(**stats: int) -> CommitRecord:
    return CommitRecord(
        query_id="q",
        batch_id=3,
        attempt="a",
        committed_at=datetime(2026, 11, 26, tzinfo=UTC),
        partition="dt=2026-11-26",
        manifests=(),
        quarantine_files=(),
        sources=(),
        tables=(TableShare(table="events", stats=BatchStats(records_out=7, **stats)),),
        stats=BatchStats(records_out=7, **stats),
    )


def test_a_record_with_nothing_to_say_in_a_new_field_reads_in_the_version_before() -> None:
    record = _record()
    data = json.loads(record_json(record))
    for stats in (data["stats"], data["tables"][0]["stats"]):
        assert not set(OMITTED_AT_ZERO) & set(stats)
        assert _before().model_validate(stats).records_out == 7
    # and the job reads it back whole, the field at its default
    assert CommitRecord.model_validate_json(record_json(record)) == record


def test_a_record_that_has_something_to_say_keeps_it_and_the_version_before_names_it() -> None:
    record = _record(overflow_records=5)
    assert CommitRecord.model_validate_json(record_json(record)) == record
    with pytest.raises(ValidationError, match="overflow_records"):
        _before().model_validate(json.loads(record_json(record))["stats"])
    # every other serialization keeps the field: a log line says 0 when it is 0
    assert BatchStats().model_dump()["overflow_records"] == 0


def test_a_figure_a_later_version_adds_is_read_past_by_this_one() -> None:
    # a rollback to this version reads the records the later one wrote (their figures it knows)
    data = json.loads(record_json(_record(overflow_records=5)))
    data["stats"]["rows_of_a_later_kind"] = 9
    data["tables"][0]["stats"]["rows_of_a_later_kind"] = 9
    record = CommitRecord.model_validate(data)
    assert record.stats.overflow_records == 5 and record.tables[0].stats.records_out == 7
    # what is not a figure is still refused
    with pytest.raises(ValidationError, match="a_later_field"):
        CommitRecord.model_validate({**data, "a_later_field": 1})


def test_rule_counts_per_object_ride_in_the_share_s_figures_which_a_build_before_rules_reads_past() -> None:
    # Review of issue 47: SourceRecord refuses fields it does not know, so a count per object in it
    # made every record with a broken rule unreadable to the build before (a rollback would not start)
    from contracts.ledger import SourceRecord, object_identity
    from glue_processor.table.history import history_rows

    source = SourceRecord(
        bucket="b", key="k.json", etag="e1", size=9, event_time=datetime(2026, 11, 26, tzinfo=UTC),
        manifest_uri="m", status="ingested", records=2, table="events",
    )  # fmt: skip
    counts = {object_identity("b", "k.json", "e1", None): {"positive_amount": 3}}
    stats = BatchStats(records_out=2, rule_violations={"positive_amount": 3}, object_violations=counts)
    record = _record().model_copy(update={"sources": (source,), "tables": (TableShare(table="events", stats=stats),)})
    data = json.loads(record_json(record))
    # Then a source says nothing new (the model the build before has reads it)
    assert set(data["sources"][0]) <= set(SourceRecord.model_fields)
    assert SourceRecord.model_config["extra"] == "forbid"
    # and the share's figures carry the counts, which BatchStats of any build reads past if it must
    assert data["tables"][0]["stats"]["object_violations"] == counts
    assert BatchStats.model_config["extra"] == "ignore"
    # and the load history gets them per object
    rows = history_rows(record, record.sources, database="ingest", legacy="events", snapshots={})
    assert rows.column("rule_violations").to_pylist() == [[("positive_amount", 3)]]
