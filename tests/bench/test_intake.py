"""Intake keeps up: the seed's manifest arrivals replayed against the stack's trigger policy."""

from __future__ import annotations

from typing import Any

from bench.intake import MIB, Arrivals, LambdaBatching, TriggerPolicy, simulate
from glue_processor.settings import settings_from_mapping
from infra.build import render

T = render()


def default(name: str) -> Any:
    # a whole-number parameter is a String with a pattern (infra/parameters.py): its default as the number
    value = T["Parameters"][name]["Default"]
    return int(value) if isinstance(value, str) and value.isdigit() else value


def stack_policy() -> tuple[LambdaBatching, int, int]:
    args = T["Resources"]["GlueJob"]["Properties"]["DefaultArguments"]
    wanted = {"max_files_per_trigger", "max_bytes_per_trigger", "max_manifest_bytes"}
    budget = {k[2:]: str(default(v["Ref"])) for k, v in args.items() if k[2:] in wanted}
    settings = settings_from_mapping(
        {
            "manifest_uri": "s3://m/manifests",
            "output_uri": "s3://o/data",
            "quarantine_uri": "s3://o/quarantine",
            "checkpoint_uri": "s3://a/checkpoint",
            **budget,
        }
    )
    lam = LambdaBatching(
        batch_size=default("SqsBatchSize"),
        window_s=default("SqsBatchingWindowSeconds"),
        concurrency=default("ManifestLambdaMaxConcurrency"),
        max_manifest_bytes=default("MaxManifestBytes"),
        max_manifest_files=default("MaxManifestFiles"),
    )
    # a whole-number parameter is a String with a pattern (infra/parameters.py)
    return lam, settings.files_per_trigger, int(default("TriggerIntervalSeconds"))


SEED = Arrivals(files_per_hour=200_000, file_bytes=round(3.5 * MIB))  # ~194 MB/s
CLUSTER = 2 * 194 * MIB  # a cluster sized with 2x headroom: intake, not compute, is under test


def test_stack_defaults_keep_up_with_the_seeds_manifest_arrivals() -> None:
    # Given the stack's Lambda batching and trigger policy, and a cluster that could keep up
    lam, files_per_trigger, trigger_s = stack_policy()
    policy = TriggerPolicy(trigger_s=trigger_s, files_per_trigger=files_per_trigger, throughput_bytes_s=CLUSTER)
    # When an hour of the seed's load is replayed
    out = simulate(SEED, lam, policy, seconds=3600)
    # Then every trigger takes what waits: the backlog never exceeds one trigger's arrivals
    per_trigger = out.manifests_written * trigger_s / 3600
    assert out.manifests_written > 500
    assert out.max_backlog_manifests <= max(files_per_trigger, 2 * per_trigger)
    assert out.final_backlog_manifests <= 2 * per_trigger
    assert out.max_backlog_age_s < 120  # far inside the seed's 600 s SLA


def test_one_manifest_per_trigger_falls_behind_the_seeds_load() -> None:
    # The seed job's maxFilesPerTrigger=1 on the same arrivals and the same cluster
    lam, _, trigger_s = stack_policy()
    out = simulate(SEED, lam, TriggerPolicy(trigger_s=trigger_s, files_per_trigger=1, throughput_bytes_s=CLUSTER))
    assert out.final_backlog_manifests > out.manifests_written / 2
    assert out.max_backlog_age_s > 1800


def test_the_byte_budget_binds_through_the_manifest_bound() -> None:
    lam, files_per_trigger, _ = stack_policy()
    budget = int(default("MaxBytesPerTrigger"))
    assert files_per_trigger == min(default("MaxFilesPerTrigger"), budget // lam.max_manifest_bytes)
    assert files_per_trigger * lam.max_manifest_bytes <= budget
