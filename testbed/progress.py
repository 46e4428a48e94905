"""Progress of a command that runs many runs (experiments, sweeps): runs done, failed and already
complete, and the time left, estimated from the runs finished in this session."""
from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import Optional, TextIO


@dataclass(frozen=True)
class Outcome:
    name: str  # the run: its id or its sweep digest
    status: str  # complete | incomplete | skipped (complete before)
    seconds: float
    error: str = ""


class Progress:
    """Called with each run's Outcome; prints a line at most every `every_s` (and at the end) to
    `stream` (default: standard error)."""

    def __init__(self, total: int, what: str = "sweep", stream: Optional[TextIO] = None, every_s: float = 5.0) -> None:
        self.total, self.what, self.stream, self.every_s = total, what, stream, every_s
        self.counts = {"complete": 0, "incomplete": 0, "skipped": 0}
        self.t0 = time.monotonic()
        self._last = 0.0
        self._lock = threading.Lock()

    def __call__(self, outcome: Outcome) -> None:
        with self._lock:
            self.counts[outcome.status if outcome.status in self.counts else "incomplete"] += 1
            if outcome.error:
                print(f"{self.what}: run {outcome.name} failed: {outcome.error}", file=self.stream or sys.stderr)
            now = time.monotonic()
            if now - self._last >= self.every_s or self.finished == self.total:
                self._last = now
                print(self.line(now), file=self.stream or sys.stderr, flush=True)

    @property
    def finished(self) -> int:
        return sum(self.counts.values())

    def line(self, now: float) -> str:
        ran = self.counts["complete"] + self.counts["incomplete"]
        left = self.total - self.finished
        elapsed = now - self.t0
        eta = f"{elapsed / ran * left:.0f} s" if ran and left else ("0 s" if not left else "?")
        return (f"{self.what}: {self.finished}/{self.total} runs ({self.counts['complete']} done, "
                f"{self.counts['incomplete']} failed, {self.counts['skipped']} already complete), "
                f"{elapsed:.0f} s elapsed, about {eta} left")
