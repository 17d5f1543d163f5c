"""A Spark Python worker re-reads a zip archive's directory only when the archive changed.

PySpark 3.5 calls ``importlib.invalidate_caches()`` before every task; on Python 3.11 that re-reads
every imported zip's directory at once (python/cpython#103200), ~80 ms of CPU per task here.
"""

from __future__ import annotations

import importlib
import os
import sys
import zipfile
import zipimport
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from glue_processor import workers
from glue_processor.batch import ManifestBatchJob

pytestmark = pytest.mark.skipif(sys.version_info >= (3, 12), reason="zip importers are lazy from 3.12 on")


@pytest.fixture
def patched() -> Iterator[None]:
    """The worker set-up in this process, undone afterwards (the suite's driver is no worker)."""
    import pyspark.worker

    original = zipimport.zipimporter.invalidate_caches
    read_int = pyspark.worker.read_int  # type: ignore[attr-defined]
    workers.setup()
    yield
    zipimport.zipimporter.invalidate_caches = original  # type: ignore[method-assign]
    pyspark.worker.read_int = read_int  # type: ignore[attr-defined]
    workers._original = workers._read_int = None


def _archive(path: Path, modules: dict[str, str]) -> None:
    with zipfile.ZipFile(path, "w") as z:
        for name, body in modules.items():
            z.writestr(zipfile.ZipInfo(f"{name}.py", date_time=(2026, 1, 1, 0, 0, 0)), body)


def _importable(archive: Path, modules: dict[str, str], monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """``archive`` with ``modules`` on sys.path, and ``names`` not imported yet."""
    _archive(archive, modules)
    monkeypatch.syspath_prepend(str(archive))
    for name in names:
        monkeypatch.delitem(sys.modules, name, raising=False)


def _reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = zipimport._read_directory  # type: ignore[attr-defined]

    def counting(archive: str) -> Any:
        seen.append(archive)
        return real(archive)

    monkeypatch.setattr(zipimport, "_read_directory", counting)
    return seen


def test_an_unchanged_archive_is_not_read_again_and_a_changed_one_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, patched: None
) -> None:
    archive = tmp_path / "job.zip"
    _importable(archive, {"zw_first": "VALUE = 1\n"}, monkeypatch, "zw_first", "zw_second")
    assert importlib.import_module("zw_first").VALUE == 1
    reads = _reads(monkeypatch)

    importlib.invalidate_caches()  # the first task after set-up: each importer reads once
    first = len(reads)
    importlib.invalidate_caches()
    importlib.invalidate_caches()
    assert [r for r in reads if r == str(archive)] == [str(archive)]  # once, then never while unchanged
    assert len(reads) == first

    # a task that brings a new version of the archive: its new module is found
    _archive(archive, {"zw_first": "VALUE = 1\n", "zw_second": "VALUE = 2 # a longer archive\n"})
    importlib.invalidate_caches()
    assert [r for r in reads if r == str(archive)] == [str(archive)] * 2
    assert importlib.import_module("zw_second").VALUE == 2


def test_an_archive_rewritten_with_its_size_and_mtime_kept_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, patched: None
) -> None:
    """``cp -p`` or ``rsync -t`` over the archive: same size, same mtime, new content (its ctime moves)."""
    archive = tmp_path / "same.zip"
    _importable(archive, {"zw_same_a": "VALUE = 1\n"}, monkeypatch, "zw_same_a", "zw_same_b")
    importlib.import_module("zw_same_a")
    importlib.invalidate_caches()
    before = archive.stat()
    _archive(archive, {"zw_same_b": "VALUE = 2\n"})
    os.utime(archive, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (archive.stat().st_size, archive.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    importlib.invalidate_caches()
    assert importlib.import_module("zw_same_b").VALUE == 2


def test_a_removed_archive_empties_its_importer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, patched: None) -> None:
    archive = tmp_path / "gone.zip"
    _importable(archive, {"zw_gone": "VALUE = 3\n"}, monkeypatch, "zw_gone")
    importlib.import_module("zw_gone")
    importlib.invalidate_caches()
    archive.unlink()
    importlib.invalidate_caches()
    monkeypatch.delitem(sys.modules, "zw_gone")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("zw_gone")


def _invalidation(_: object) -> str:
    return zipimport.zipimporter.invalidate_caches.__name__


def test_the_batch_tasks_run_in_set_up_workers(spark: Any) -> None:
    """Every Spark job of a batch goes through ``ManifestBatchJob._spark_map``: its tasks run in workers
    whose zip importers are the patched ones (the driver's are left alone)."""
    names = ManifestBatchJob._spark_map(SimpleNamespace(spark=spark), _invalidation, [1, 2])  # type: ignore[arg-type]
    assert names == ["_invalidate_if_changed"] * 2
    assert _invalidation(None) == "invalidate_caches"
