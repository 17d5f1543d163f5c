"""Peak RSS of a whole process tree (the Python driver and its JVM), sampled in a thread."""

from __future__ import annotations

import threading
import time
from types import TracebackType

import psutil


class PeakRss:
    def __init__(self, pid: int | None = None, interval_s: float = 0.1) -> None:
        self.process = psutil.Process(pid)
        self.interval_s = interval_s
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def current(self) -> int:
        total = 0
        for p in [self.process, *self.process.children(recursive=True)]:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                continue
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.current())
            time.sleep(self.interval_s)

    def __enter__(self) -> PeakRss:
        self.peak = self.current()
        self._thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.current())
