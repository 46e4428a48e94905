"""The event-log tables of a job-mode run (docs/papers/daedalus.md#mapping), built alike from the
series of every engine (the simulator, the live containers, Flink): one row per monitoring interval
for the job as a whole, one per worker in
`instance_stats`, plus the tables the platform's report expects that job mode leaves empty."""
from __future__ import annotations

from typing import Any, Dict, Mapping, Sequence, Union

import numpy as np

from operators.keyed_job import worker_name
from testbed.actions import actions_table
from testbed.job.ledger import RESCALE_COLUMNS, new_rescales
from testbed.policies.contract import Policy
from testbed.policies.job_inputs import JOB_OPERATOR

LEASE_COLUMNS = ("host", "start_s", "end_s", "btu_s", "paid_btus", "prolongations", "released")
__all__ = ["RESCALE_COLUMNS", "job_tables", "new_rescales"]


def job_tables(step: int, arrivals: np.ndarray, thr: np.ndarray, cpu: np.ndarray, lag: np.ndarray,
               parallel: Union[Sequence[int], np.ndarray], running: Union[Sequence[int], np.ndarray],
               lat_t: Sequence[float], lat_ms: Sequence[float],
               records: Sequence[Any], policy: Policy, rescales: Mapping[str, list]) -> Dict[str, Dict[str, list]]:
    """Per second s (0-based, ending at s + 1): `arrivals[s]`, `thr[s, w]` and `cpu[s, w]` per worker
    w (NaN: not running), `lag[s]`, `parallel[s]` workers deployed of which `running[s]` run;
    latency samples (lat_t, lat_ms); the policy's actions and its own records."""
    D = len(arrivals)
    tables: Dict[str, Dict[str, list]] = {
        "load": {"t_s": [float(s + 1) for s in range(D)], "machines": [0] * D, "source": ["source"] * D,
                 "items": np.asarray(arrivals).astype(np.int64).tolist(), "lateness_ms": [0.0] * D},
        **_interval_tables(step, arrivals, thr, lag, parallel, running),
        "instance_stats": _worker_stats(range(step, D + 1, step), step, thr, cpu, parallel),
        "latency": {"t_s": list(lat_t), "operator": [JOB_OPERATOR] * len(lat_t), "latency_ms": list(lat_ms)},
        "actions": actions_table(records, policy.name),
        "rescales": dict(rescales),
        # the platform's report reads these; job mode has no per-operator duration samples and no VMs
        "samples": {"t_s": [], "operator": [], "instance": [], "duration_ms": []},
        "leases": {k: [] for k in LEASE_COLUMNS},
    }
    tables.update(policy.records())
    return tables


def _interval_tables(step: int, arrivals: np.ndarray, thr: np.ndarray, lag: np.ndarray,
                     parallel: Union[Sequence[int], np.ndarray],
                     running: Union[Sequence[int], np.ndarray]) -> Dict[str, Dict[str, list]]:
    """One row per monitoring interval for the job as a whole (it ends at `t_s`)."""
    ends = list(range(step, len(arrivals) + 1, step))
    te = [float(e) for e in ends]
    n = [int(parallel[e - 1]) for e in ends]
    up = [int(running[e - 1]) for e in ends]
    job = [JOB_OPERATOR] * len(ends)
    return {
        "processed": {"t_s": te, "operator": job, "items": [int(round(thr[e - step:e].sum())) for e in ends]},
        "queues": {"t_s": list(te), "operator": list(job), "depth": [int(round(lag[e - 1])) for e in ends]},
        "instances": {"t_s": list(te), "operator": list(job), "instances": up,
                      "starting": [a - b for a, b in zip(n, up, strict=True)], "hosts": n},
        "hosts": {"t_s": list(te), "leased": list(n), "ready": list(up)},
        "edges": {"t_s": list(te), "source": ["source"] * len(ends), "target": list(job),
                  "items": [int(arrivals[e - step:e].sum()) for e in ends]},
    }


def _worker_stats(ends: range, step: int, thr: np.ndarray, cpu: np.ndarray,
                  parallel: Union[Sequence[int], np.ndarray]) -> Dict[str, list]:
    """`instance_stats`: per monitoring interval (ending at each of `ends`), one row per worker
    deployed at its end."""
    stats: Dict[str, list] = {"t_s": [], "operator": [], "instance": [], "processed": [], "utilisation": []}
    for e in ends:
        sl = slice(e - step, e)
        for w in range(int(parallel[e - 1])):
            c = cpu[sl, w]
            c = c[np.isfinite(c)]
            stats["t_s"].append(float(e))
            stats["operator"].append(JOB_OPERATOR)
            stats["instance"].append(worker_name(w))
            stats["processed"].append(int(round(thr[sl, w].sum())))
            stats["utilisation"].append(float(c.mean()) if c.size else 0.0)
    return stats
