"""The Daedalus report's figures: per workload, workers and latency over time and the latency ECDF."""
from __future__ import annotations

from pathlib import Path
from typing import List

import numpy as np
import pandas as pd

from reporting.evaluations.daedalus.measures import parallelism
from testbed.eventlog import EventLog


def figures(runs: pd.DataFrame, out: Path) -> List[Path]:
    """Per workload: workers and latency over time (repetition 1 of each configuration, with the
    workload), and the latency ECDF over all repetitions (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for pattern, g in runs.groupby("pattern"):
        fig, (a1, a2) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
        for _, r in g[g.rep == g.rep.min()].iterrows():
            log = EventLog(Path(r.run_dir))
            par = parallelism(log)
            a1.step(par.t_s / 3600, par.n, where="post", label=r.config, linewidth=1)
            lat = log.read("latency")
            per_min = lat.groupby(np.floor(lat.t_s / 60)).latency_ms.mean()
            a2.plot(per_min.index / 60, per_min.values / 1000, label=r.config, linewidth=1)
        load = EventLog(Path(g.run_dir.iloc[0])).read("load")
        ax = a1.twinx()
        ax.plot(load.t_s / 3600, load["items"].rolling(60, min_periods=1).mean(), color="grey", alpha=0.4, linewidth=1)
        ax.set_ylabel("workload [items/s]")
        a1.set_ylabel("workers")
        a1.legend(fontsize=7, ncol=3, loc="upper right")
        a2.set_yscale("log")
        a2.set_ylabel("latency per minute [s]")
        a2.set_xlabel("time [h]")
        a1.set_title(f"{pattern}: workers and latency over time (repetition 1)")
        fig.tight_layout()
        p = out / f"daedalus_{pattern}_timeline.png"
        fig.savefig(p, dpi=90, metadata={"Software": None})
        plt.close(fig)
        paths.append(p)
        fig, ax = plt.subplots(figsize=(6, 4))
        for config, gc in g.groupby("config", sort=False):
            v = np.sort(np.concatenate([EventLog(Path(d)).read("latency").latency_ms.to_numpy() for d in gc.run_dir]))
            ax.plot(v, np.arange(1, len(v) + 1) / len(v), label=config, linewidth=1)
        ax.set_xscale("log")
        ax.set_xlabel("latency [ms]")
        ax.set_ylabel("ECDF")
        ax.set_title(f"{pattern}: latency ECDF (all repetitions)")
        ax.legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        p = out / f"daedalus_{pattern}_latency_ecdf.png"
        fig.savefig(p, dpi=90, metadata={"Software": None})
        plt.close(fig)
        paths.append(p)
    return paths
