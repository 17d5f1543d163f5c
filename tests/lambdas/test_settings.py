"""Lambda configuration errors fail at start-up, naming the setting."""

from __future__ import annotations

import pytest

from contracts.exceptions import ConfigError
from lambdas.control_plane.settings import load_settings as control_settings
from lambdas.manifest_builder.settings import load_settings as builder_settings


def test_builder_requires_its_bucket_and_sane_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MANIFEST_BUCKET", raising=False)
    with pytest.raises(ConfigError, match="MANIFEST_BUCKET"):
        builder_settings()
    with pytest.raises(ConfigError, match="MAX_MANIFEST_FILES"):
        builder_settings(manifest_bucket="bkt", max_manifest_files=0)
    with pytest.raises(ConfigError, match="source_suffixes: suffixes must list at least one suffix"):
        builder_settings(manifest_bucket="bkt", source_suffixes="")
    with pytest.raises(ConfigError, match="overlap"):
        builder_settings(manifest_bucket="bkt", source_suffixes=".json.gz,.gz")
    monkeypatch.setenv("MAX_MANIFEST_BYTES", "a lot")
    with pytest.raises(ConfigError, match="MAX_MANIFEST_BYTES"):
        builder_settings(manifest_bucket="bkt")


def test_builder_parses_suffix_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    # the filter is S3's: a plain string prefix, case-sensitive suffixes, '*' for every key
    monkeypatch.setenv("SOURCE_SUFFIXES", ".json, .LOG.gz")
    s = builder_settings(manifest_bucket="bkt", source_prefix="in/app-")
    assert s.source_suffixes == (".json", ".LOG.gz") and s.source_prefix == "in/app-"
    assert s.accepts("in/app-1.LOG.gz") and not s.accepts("in/app-1.log.gz") and not s.accepts("out/x.json")
    monkeypatch.setenv("SOURCE_SUFFIXES", "*")
    anything = builder_settings(manifest_bucket="bkt", source_prefix="in/")
    assert anything.accepts("in/no-suffix") and not anything.accepts("out/x.json")


def test_control_plane_rejects_impossible_limits() -> None:
    # a minimum above the maximum is the one relation the stack cannot refuse (CloudFormation rules
    # compare no numbers): read as the range it spans, and said (tests/infra/test_parameters.py)
    swapped = control_settings(job_name="j", min_workers=8, max_workers=4)
    assert (swapped.min_workers, swapped.max_workers) == (4, 8)
    assert swapped.misconfigured == ("MIN_WORKERS=8 > MAX_WORKERS=4: sizing within [4, 8]",)
    with pytest.raises(ConfigError, match="MAX_WORKERS: Input should be less than or equal to 299"):
        control_settings(job_name="j", max_workers=300)
    with pytest.raises(ConfigError, match="LATENCY_SLA_S: Input should be greater than or equal to 1"):
        control_settings(job_name="j", latency_sla_s=0)
    with pytest.raises(ConfigError, match="TABLE_NAME: Value error, '_commits' is the job's own folder"):
        control_settings(job_name="j", table_name="_commits")
    with pytest.raises(ConfigError, match="hysteresis"):
        control_settings(job_name="j", scale_down_utilization=0.7, target_utilization=0.6)
    with pytest.raises(ConfigError, match="SCALING_MODE"):
        control_settings(job_name="j", scaling_mode="magic")
