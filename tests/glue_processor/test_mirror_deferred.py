"""A table that mirrors its bucket never has a share set aside (review 44, finding 1): every batch
plans against the key index a share's publication writes, so a later batch planned past a share set
aside would take its keys as new, and both versions' rows would stay for good."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.glue_processor.test_routing import ROUTING, FailingFor, lines, routed_env, rows_of

# the routing of test_routing.py, its tables mirroring their buckets (on_overwrite's default: replace)
MIRRORING = {
    **ROUTING,
    "tables": {n: {k: v for k, v in t.items() if k != "on_overwrite"} for n, t in ROUTING["tables"].items()},
}

pytestmark = pytest.mark.spark


def test_a_later_version_waits_for_the_share_its_key_was_loaded_by(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = routed_env(tmp_path, MIRRORING, publish_hold_seconds="5")  # several tables: shares may be set aside
    job = env.job(spark)
    job.sleep = lambda s: None
    job.start()
    failing = FailingFor(monkeypatch, "clicks", errors=3)  # the clicks table refuses commits a while
    # Given v1 of a key whose table cannot commit for now
    job.run([env.manifest("m0", [env.put("clicks/c.ndjson", lines({"u": "v1", "country": "fr"}))])], 0)
    # Then its share was not set aside: the batch waited until it went in
    assert failing.errors == 0 and not job.deferred.items()
    # And a later version replaces it
    job.run([env.manifest("m1", [env.put("clicks/c.ndjson", lines({"u": "v2", "country": "fr"}))])], 1)
    assert sorted(r["u"] for r in rows_of(env, "clicks")) == ["v2"]
