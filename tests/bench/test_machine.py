"""The benches' machine line: a fixed CPU workload and what writing new files costs, measured in a
fresh process, so a run's figures can be read against another day's."""

from __future__ import annotations

from pathlib import Path

from bench.machine import Machine, probe


def test_probe_times_a_fixed_hash_and_two_file_writes_and_leaves_no_file(tmp_path: Path) -> None:
    where = tmp_path / "bench"
    got = probe(where, mb=16)
    # each a time that was measured (a hash of 64 MB takes tens of ms; 16 MB of writes cannot be free)
    assert 0.001 < got.cpu_s < 30
    assert got.fresh_s_per_gb > 0 and got.reused_s_per_gb > 0
    assert list(where.iterdir()) == []  # its files are deleted: nothing of it stays in the bench's data


def test_the_line_states_each_figure() -> None:
    line = Machine(cpu_s=0.0461, fresh_s_per_gb=3.48, reused_s_per_gb=0.26).line()
    assert "0.046 s" in line and "3.48 s/GB" in line and "0.26 s/GB" in line
    assert "docs/performance.md" in line
