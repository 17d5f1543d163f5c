"""The machine's state when a bench ran: how fast a core is, and what writing new files costs.

The same code's figures on this VM move by 10-60 % between hours and days. Two causes, measured
(docs/performance.md, "This machine's memory"): the host's load on the vCPU, and memory the guest
has not used lately, which the host backs only at its first touch. A new file's page cache is such
memory: 512 MB of new file took 1.6-2.1 s to write, and 0.11-0.15 s again right after the first was
deleted (its pages reused); a freed page goes back to the host within seconds (the balloon's free
page reporting). A batch that writes 150 MB of parts and files pays it. ``probe`` measures both,
in a fresh process pinned like the bench's, so that a run can be read against another:

- ``cpu_s``: the seconds one core takes to hash 64 MB (SHA-256): a fixed workload;
- ``fresh_s_per_gb``: writing a new file (the page cache it fills), per GB;
- ``reused_s_per_gb``: the same again, right after deleting the first (its pages freed).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

_PROBE = """
import hashlib, json, os, sys, time
mb, path = int(sys.argv[1]), sys.argv[2]
data = bytes(range(256)) * (64 * 4096)
t0 = time.perf_counter(); hashlib.sha256(data).digest(); cpu = time.perf_counter() - t0
block = os.urandom(8 * 1024 * 1024)
blocks = max(1, mb // 8)
def write():
    t0 = time.perf_counter()
    with open(path, "wb") as out:
        for _ in range(blocks):
            out.write(block)
    took = time.perf_counter() - t0
    os.unlink(path)
    return took
fresh = write()
reused = write()  # the page cache the first file left, freed by its unlink
print(json.dumps({"cpu_s": cpu, "fresh_s": fresh, "reused_s": reused, "bytes": blocks * len(block)}))
"""


@dataclass(frozen=True)
class Machine:
    cpu_s: float
    fresh_s_per_gb: float
    reused_s_per_gb: float

    def line(self) -> str:
        return (
            f"this machine now: SHA-256 of 64 MB on one core {self.cpu_s:.3f} s; a new file "
            f"{self.fresh_s_per_gb:.2f} s/GB to write, {self.reused_s_per_gb:.2f} s/GB on pages just freed "
            "(figures move with both: docs/performance.md)"
        )


def probe(where: Path, cpus: str = "0", mb: int = 256) -> Machine:
    """Both probes in a fresh process on ``cpus`` (a taskset list; unpinned without taskset), the files
    (``mb`` MB, in 8 MB writes) in ``where``: the bench's own directory, the file system its runs use."""
    where.mkdir(parents=True, exist_ok=True)
    pin = ["taskset", "-c", cpus] if shutil.which("taskset") else []
    cmd = [*pin, sys.executable, "-c", _PROBE, str(mb), str(where / ".machine-probe")]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    got = json.loads(out.strip().splitlines()[-1])
    per_gb = 1024**3 / got["bytes"]
    return Machine(got["cpu_s"], got["fresh_s"] * per_gb, got["reused_s"] * per_gb)
