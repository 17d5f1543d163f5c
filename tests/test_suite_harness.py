"""The suite's own harness (tests/conftest.py) as make test runs it: two pytest-xdist processes."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

INNER = """
import json, os, time
import pytest

@pytest.mark.builds
@pytest.mark.parametrize("n", range(4))
def test_build(n):
    began = time.monotonic()
    time.sleep(0.4)
    with open(os.environ["RECORD"], "a") as f:
        f.write(json.dumps([os.environ.get("PYTEST_XDIST_WORKER"), began, time.monotonic()]) + "\\n")
"""


def test_tests_that_build_run_one_at_a_time_across_the_workers(tmp_path: Path) -> None:
    # Given tests marked builds (as tests/conftest.py marks those building the wheel, the Lambda zip
    # and .parity/), under the suite's hooks, on two xdist workers
    (tmp_path / "conftest.py").write_text("from tests.conftest import pytest_runtest_protocol  # noqa: F401\n")
    (tmp_path / "test_inner.py").write_text(INNER)
    record = tmp_path / "record.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RECORD": str(record)}
    args = [sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider"]
    out = subprocess.run(
        [*args, str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    runs = sorted((began, ended, worker) for worker, began, ended in map(json.loads, record.read_text().splitlines()))
    # Then both workers ran some, and no two ran at once
    assert len(runs) == 4 and {w for _, _, w in runs} == {"gw0", "gw1"}, runs
    assert all(later[0] >= earlier[1] for earlier, later in itertools.pairwise(runs)), runs
