"""Parse tasks are planned by input: every core of the cluster has work, whatever the output size."""

from __future__ import annotations

from glue_processor.plan.sizing import MAX_UNIT_BYTES, MIN_SPLIT_BYTES, UNITS_PER_CORE, parse_unit_count, plan_groups

MB = 1024 * 1024


def executor_cores(worker_type: str, workers: int) -> int:
    """Glue: one executor per worker but the driver's; G.1X has 4 vCPUs, G.2X 8, G.025X 2."""
    vcpus = {"G.025X": 2, "G.1X": 4, "G.2X": 8}[worker_type]
    return (workers - 1) * vcpus


def test_a_1_gb_manifest_on_16_g1x_workers_keeps_every_core_busy() -> None:
    # Given a 1 GB manifest of 1,000 objects of 1 MB (one output file of ~300 MB Parquet, 2-3 files)
    sizes = [1.0 * MB] * 1000
    cores = executor_cores("G.1X", 16)
    # When the batch is planned
    units = plan_groups(sizes, parse_unit_count(sizes, cores=cores))
    # Then there are at least as many parallel units as executor cores, of even size
    assert cores == 60
    assert len(units) >= cores
    totals = [sum(sizes[i] for i in u) for u in units]
    assert max(totals) - min(totals) <= 1 * MB


def test_units_never_outnumber_objects_and_cap_their_input() -> None:
    assert parse_unit_count([5.0 * MB] * 3, cores=60) == 3
    assert parse_unit_count([], cores=8) == 0
    big = [MAX_UNIT_BYTES / 4] * 400  # 100 x the cap in all
    assert parse_unit_count(big, cores=4) == 100


def test_a_second_task_per_core_only_when_it_has_enough_to_read() -> None:
    # a small batch: one task per core (a task's fixed cost would be a large share of a small one)
    assert parse_unit_count([8.0 * MB] * 8, cores=2) == 2
    # a batch with MIN_SPLIT_BYTES per extra task: two per core
    assert parse_unit_count([MIN_SPLIT_BYTES / 2] * 16, cores=2) == UNITS_PER_CORE * 2
    # the seed's trigger (~5.8 GB of ~3.5 MB objects) on 80 cores: 73 MB a task, one per core
    assert parse_unit_count([3.5 * MB] * 1667, cores=80) == 80
    # twice that: two per core
    assert parse_unit_count([3.5 * MB] * 3334, cores=80) == 160


def test_every_core_gets_the_same_number_of_tasks() -> None:
    # Given batches between one and two MIN_SPLIT_BYTES per core, or past the cap per task
    for cores in (2, 7, 80):
        for total in (1.5 * MIN_SPLIT_BYTES * cores, 3 * MIN_SPLIT_BYTES * cores, 5.5 * MAX_UNIT_BYTES * cores):
            sizes = [total / 4000] * 4000
            # Then the tasks are a multiple of the cores, so no core waits on another's second task
            assert parse_unit_count(sizes, cores=cores) % cores == 0
