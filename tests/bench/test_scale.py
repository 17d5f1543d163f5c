"""``make bench-scale``'s reading of a run: a warm batch's parts, and Amdahl's ceiling from them."""

from __future__ import annotations

import pytest

from bench.scale import ceilings, parts


def _warm(batch: float, parse: float, write: float, spark: float, **steps: float) -> dict[str, object]:
    stages = {"read_parse_write": parse, "write": write}
    return {"batch_s": batch, "spark_s": spark, "stages": stages, "steps": {"total": 9.0, **steps}}


def test_a_batchs_parts_add_up_to_its_duration() -> None:
    got = parts(_warm(1.6, 0.9, 0.4, 0.2, collect=0.03, publish=0.05))
    assert {k: got[k] for k in ("batch", "parse", "write", "spark", "rest")} == pytest.approx(
        {"batch": 1.6, "parse": 0.9, "write": 0.4, "spark": 0.2, "rest": 0.1}
    )
    # the rest by the job's driver steps, what none of them timed in "other"; "total" is not a step
    assert got["collect"] == 0.03 and got["publish"] == 0.05 and got["plan"] == 0.0
    assert got["other"] == pytest.approx(0.02)
    no_stage = parts({"batch_s": 0.5, "spark_s": 0.2, "stages": {}})
    assert no_stage["rest"] == pytest.approx(0.3) and no_stage["other"] == pytest.approx(0.3)


def test_the_ceiling_halves_the_parse_then_all_but_sparks_steps() -> None:
    one = parts(_warm(1.6, 0.9, 0.4, 0.2))
    got = ceilings(one)
    assert got["parse halved"] == pytest.approx(1.6 / (0.7 + 0.45))
    assert got["all but Spark halved"] == pytest.approx(1.6 / (0.2 + 0.7))
    # a batch that is all parse halves whole; one that is all Spark cannot move
    assert ceilings(parts(_warm(1.0, 1.0, 0.0, 0.0)))["parse halved"] == pytest.approx(2.0)
    assert ceilings(parts(_warm(1.0, 0.0, 0.0, 1.0)))["all but Spark halved"] == pytest.approx(1.0)
    # Spark's steps at 1/9 of the batch leave exactly 1.8x
    assert ceilings(parts(_warm(0.9, 0.8, 0.0, 0.1)))["all but Spark halved"] == pytest.approx(1.8)
