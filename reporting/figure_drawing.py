"""The report's figures drawn in worker processes, one figure per task, on all cores (at most 2 by
default: the report's machine). The workers are forked from a server process that imports
matplotlib and seaborn (reporting.figures) once, while the Spark stage runs; the report's own
process never imports them.
"""
from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional

import pandas as pd

from reporting.figure_data import FigureData


def _draw(function: str, *args) -> Path:
    from reporting import figures

    return getattr(figures, function)(*args)


class FigureWorkers:
    def __init__(self, workers: Optional[int] = None):
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["reporting.figures"])
        self.workers = workers or min(2, os.cpu_count() or 1)
        self._pool = ProcessPoolExecutor(self.workers, mp_context=context)
        for _ in range(self.workers):
            self._pool.submit(int)  # start them now, not when the first figure is due

    def draw(self, out: Path, data: FigureData, comparison: pd.DataFrame, order: List[str], dpi: int) -> Dict[str, Path]:
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
            jobs["cost_vs_paper"] = self._pool.submit(_draw, "cost_vs_paper", comparison, folder / "cost_vs_paper.png", dpi)
        return {name: job.result() for name, job in jobs.items()}

    def close(self) -> None:
        self._pool.shutdown()
