"""``make bench-scale``'s reading of a run: a warm batch's parts, each part's seconds past a perfect
split over the cores, the verdict, and the run itself (its rounds paired, its output and JSON)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import bench.scale as scale
from bench.machine import Machine
from bench.scale import PARTS, new_pages, parts, past_split, verdict


def _warm(batch: float, parse: float, write: float, spark: float, **steps: float) -> dict[str, Any]:
    stages = {"read_parse_write": parse, "write": write}
    return {"batch_s": batch, "spark_s": spark, "stages": stages, "steps": {"total": 9.0, **steps}, "out_mb": 148.0}


def test_a_batchs_parts_add_up_to_its_duration() -> None:
    got = parts(_warm(1.6, 0.9, 0.4, 0.2, collect=0.03, publish=0.05))
    assert {k: got[k] for k in ("batch", "parse", "write", "spark", "rest")} == pytest.approx(
        {"batch": 1.6, "parse": 0.9, "write": 0.4, "spark": 0.2, "rest": 0.1}
    )
    # the rest by the job's driver steps, what none of them timed in "other"; "total" is not a step
    assert got["collect"] == 0.03 and got["publish"] == 0.05 and got["plan"] == 0.0
    assert got["other"] == pytest.approx(0.02)
    assert sum(got[k] for k in PARTS) == pytest.approx(got["batch"])
    no_stage = parts({"batch_s": 0.5, "spark_s": 0.2, "stages": {}})
    assert no_stage["rest"] == pytest.approx(0.3) and no_stage["other"] == pytest.approx(0.3)


def test_past_a_perfect_split_is_each_parts_many_core_seconds_less_its_share() -> None:
    one = parts(_warm(1.8, 0.8, 0.5, 0.1, collect=0.2))
    two = parts(_warm(1.2, 0.45, 0.5, 0.05, collect=0.1))
    past = past_split(one, two, 2)
    assert past["parse"] == pytest.approx(0.05) and past["write"] == pytest.approx(0.25)
    assert past["spark"] == pytest.approx(0.0) and past["collect"] == pytest.approx(0.0)
    assert past["batch"] == pytest.approx(0.3) == pytest.approx(sum(past[k] for k in PARTS))
    four = past_split(one, two, 4)  # the share is over the cores given, not halved
    assert four["parse"] == pytest.approx(0.45 - 0.2) and four["batch"] == pytest.approx(1.2 - 0.45)


def test_the_verdict_passes_at_the_target_and_names_the_part_most_past_its_split() -> None:
    one = parts(_warm(1.8, 0.8, 0.5, 0.1, collect=0.2))
    two = parts(_warm(1.2, 0.45, 0.5, 0.05, collect=0.1))
    assert verdict(1.5, past_split(one, two, 2)) == (
        "two cores >= 1.8x: FAIL; the most past a perfect split: write (+0.25 s of +0.30 s)"
    )
    parse_bound = parts(_warm(1.2, 0.7, 0.25, 0.05, collect=0.1))
    got = verdict(1.8, past_split(one, parse_bound, 2))
    assert got.startswith("two cores >= 1.8x: PASS;") and "split: parse (+0.30 s" in got


def test_a_run_pairs_each_rounds_runs_and_reports_the_best_pair(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[str] = []
    seconds = {("1", 1): 2.0, ("2", 2): 1.0, ("2", 3): 1.3, ("1", 4): 1.8}  # round 2 runs two cores first

    def fake_measure(shape: str, *, mb: int, cores: str, root: Path) -> dict[str, Any]:
        calls.append(cores)
        batch = seconds[cores, len(calls)]
        assert shape == "tiny-records" and mb == 50 and root == scale.SCALE_DATA
        return {"batches": [_warm(9.0, 9.0, 0.0, 0.0), _warm(batch, batch * 0.6, batch * 0.3, 0.0)]}

    monkeypatch.setattr(scale, "measure", fake_measure)
    probed: list[tuple[Path, str]] = []

    def fake_probe(where: Path, cpus: str) -> Machine:
        probed.append((where, cpus))
        return Machine(cpu_s=0.04, fresh_s_per_gb=2.0, reused_s_per_gb=0.3)

    monkeypatch.setattr(scale, "probe", fake_probe)
    out = tmp_path / "scale.json"
    assert scale.main(["--shape", "tiny-records", "--mb", "50", "--json", str(out)]) == 0
    assert calls == ["1", "2", "2", "1"]
    printed = capsys.readouterr().out
    assert "best against best: 1.80x (each round: 2.00x, 1.38x)" in printed  # 1.8/1.0; 2.0/1.0, 1.8/1.3
    assert "two cores >= 1.8x: PASS" in printed
    assert probed == [(scale.SCALE_DATA, "0")] and "a new file 2.00 s/GB to write" in printed
    # 148 MB at 2 s/GB; the best pair without its write stage: (1.8 - 0.54) / (1.0 - 0.3)
    assert "148 MB of Parquet into a new file: at this machine's 2.00 s/GB for a new file that is ~0.29 s" in printed
    assert "the batch less its write stage (on Glue, S3's own copy): 1.80x" in printed
    got = json.loads(out.read_text())
    assert [r["batch"] for r in got["runs"]["1"]] == [2.0, 1.8] and got["speedup"] == pytest.approx(1.8)
    assert got["past_split"]["batch"] == pytest.approx(1.0 - 0.9)
    assert got["machine"]["fresh_s_per_gb"] == 2.0 and got["runs"]["1"][0]["out_mb"] == 148.0
    with pytest.raises(SystemExit):
        scale.main(["--rounds", "0"])


def test_the_write_stages_new_pages_are_its_mb_at_the_machines_rate_and_the_rest_is_the_speed_up_without_it() -> None:
    one = parts({**_warm(2.0, 1.0, 0.6, 0.1), "out_mb": 100.0})
    two = parts({**_warm(1.4, 0.5, 0.6, 0.1), "out_mb": 102.4})
    got = new_pages(one, two, Machine(cpu_s=0.04, fresh_s_per_gb=4.0, reused_s_per_gb=0.3))
    assert "copies 102 MB of Parquet" in got and "4.00 s/GB for a new file that is ~0.40 s" in got
    assert "(it took 0.60 s on one, 0.60 s on two)" in got
    assert got.endswith("\nthe batch less its write stage (on Glue, S3's own copy): 1.75x")  # 1.4 / 0.8
    assert "out_mb" not in PARTS and sum(one[k] for k in PARTS) == pytest.approx(one["batch"])
