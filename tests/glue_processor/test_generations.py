"""A new checkpoint generation never reads a manifest the previous one processed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from glue_processor.generations import generation_uri, start_generation
from glue_processor.hadoop_fs import HadoopFS
from glue_processor.local.layout import local_uri
from glue_processor.settings import settings_from_mapping

pytestmark = pytest.mark.spark


def test_a_processed_manifest_left_behind_is_archived_before_the_next_generation(spark: Any, tmp_path: Path) -> None:
    root = tmp_path / "work dir ü"
    manifests, archive = root / "manifests", root / "archive"
    manifests.mkdir(parents=True)
    settings = settings_from_mapping(
        {
            "manifest_uri": local_uri(manifests),
            "manifest_archive_uri": local_uri(archive),
            "output_uri": local_uri(root / "out"),
            "quarantine_uri": local_uri(root / "q"),
            "checkpoint_uri": local_uri(root / "cp"),
            "checkpoint_rotate_manifests": "2",
            "max_files_per_trigger": "1",
        }
    )
    # Given a full first generation (2 batches) whose file source processed m1 and m2, and whose
    # archiving left m2 behind (best effort); m4 was planned for a batch 2 it never committed; m3 is new
    gen1 = Path(generation_uri(settings.checkpoint_uri, 1).removeprefix("file://"))
    (gen1 / "commits").mkdir(parents=True)
    for batch in ("0", "1"):
        (gen1 / "commits" / batch).write_text("v1\n{}\n")
    (gen1 / "sources" / "0").mkdir(parents=True)
    for n in (1, 2, 4):
        # Spark logs the path percent-encoded
        batch = min(n - 1, 2)
        entry = {"path": (manifests / f"m{n}.json").as_uri(), "timestamp": 0, "batchId": batch}
        (gen1 / "sources" / "0" / str(batch)).write_text("v1\n" + json.dumps(entry) + "\n")
    for n in (2, 3, 4):
        (manifests / f"m{n}.json").write_text("{}")
    # When the job starts the next generation
    checkpoint = start_generation(HadoopFS(spark), settings)
    # Then it runs in generation 2, and the left-behind m2 was archived first; m3 and m4 still wait
    assert checkpoint.endswith("gen-00002")
    assert sorted(p.name for p in manifests.iterdir()) == ["m3.json", "m4.json"]
    assert sorted(p.name for p in archive.iterdir()) == ["m2.json"]
