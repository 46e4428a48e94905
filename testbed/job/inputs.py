"""The policy's input in job mode: the window of the series that ends with second k, as the
`JobSnapshot` every job-mode controller reads (one conversion for every engine)."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from testbed.job.series import JobSeries
from testbed.policies.job_inputs import JobSnapshot


def job_snapshot(series: JobSeries, k: int, parallelism: int, top: int, checkpoint_s: float, window_s: int,
                 ready: Mapping[str, bool]) -> JobSnapshot:
    """The snapshot at the end of second k: the last `window_s` seconds, per worker w0..w(n-1) of
    the deployment (`ready` per worker name)."""
    lo = max(0, k + 1 - window_s)
    sl = slice(lo, k + 1)
    thr, cpu = series.thr[sl], series.cpu[sl]
    workers = {f"w{w}": w for w in range(parallelism)}
    return JobSnapshot(
        t=float(k + 1), parallelism=parallelism, max_scaleout=top, checkpoint_s=checkpoint_s,
        lag=float(series.lag[k]), seconds=np.arange(lo + 1, k + 2, dtype=float),
        workload=series.arrivals[sl].copy(),
        throughput={name: thr[:, w].copy() for name, w in workers.items()},
        cpu={name: cpu[:, w].copy() for name, w in workers.items()}, uptime=series.uptime[sl].copy(),
        ready={name: bool(ready.get(name, True)) for name in workers})
