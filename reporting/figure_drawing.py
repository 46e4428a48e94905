"""The report's figures drawn in worker processes, one figure per task, on all cores (at most 2 by
default: the report's machine). The workers are forked when the report starts, before it starts
any thread, and import matplotlib and seaborn (reporting.figures) while the Spark stage runs.

A process that runs threads already (a Spark session of its own, say) is not forked: forking
copies locks other threads may hold. There, and with one core, the figures are drawn in the
report's own process, one after the other.
"""
from __future__ import annotations

import multiprocessing
import os
import threading
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pandas as pd

from reporting.figure_data import FigureData


def _draw(function: str, *args) -> Path:
    from reporting import figures

    return getattr(figures, function)(*args)


def _import_figures() -> None:
    import reporting.figures  # noqa: F401


class _InProcess(Executor):
    def submit(self, fn: Callable, /, *args, **kwargs) -> Future:
        future: Future = Future()
        future.set_result(fn(*args, **kwargs))
        return future


class FigureWorkers:
    def __init__(self, workers: Optional[int] = None):
        workers = workers or min(2, os.cpu_count() or 1)
        self._pool: Executor
        if workers > 1 and threading.active_count() == 1:
            self._pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
            for _ in range(workers):
                self._pool.submit(_import_figures)
        else:
            self._pool = _InProcess()

    def draw(self, out: Path, data: FigureData, comparison: pd.DataFrame, order: List[str],
             dpi: int) -> Dict[str, Path]:
        """Every figure of the report into out/figures: name -> PNG path."""
        folder = out / "figures"
        folder.mkdir(parents=True, exist_ok=True)
        jobs: Dict[str, Future] = {"arrival_patterns": self._pool.submit(
            _draw, "arrival_patterns", data.arrivals, folder / "arrival_patterns.png", dpi)}
        for pattern in sorted(data.timeseries["pattern"].unique()):
            own = data.timeseries[data.timeseries["pattern"] == pattern]
            jobs[f"timeseries_{pattern}"] = self._pool.submit(
                _draw, "timeseries", own, pattern, order, folder / f"timeseries_{pattern}.png", dpi)
        for pattern in sorted(data.durations["pattern"].unique()):
            own = data.durations[data.durations["pattern"] == pattern]
            jobs[f"durations_{pattern}"] = self._pool.submit(
                _draw, "durations", own, pattern, order, folder / f"durations_{pattern}.png", dpi)
        if not comparison.empty:
            jobs["compliance_vs_paper"] = self._pool.submit(
                _draw, "compliance_vs_paper", comparison, folder / "compliance_vs_paper.png", dpi)
            jobs["cost_vs_paper"] = self._pool.submit(_draw, "cost_vs_paper", comparison, folder / "cost_vs_paper.png",
                                                      dpi)
        return {name: job.result() for name, job in jobs.items()}

    def close(self) -> None:
        self._pool.shutdown()
