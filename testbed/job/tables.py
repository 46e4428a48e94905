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
    ends = range(step, D + 1, step)
    proc: Dict[str, list] = {"t_s": [], "operator": [], "items": []}
    queues: Dict[str, list] = {"t_s": [], "operator": [], "depth": []}
    inst: Dict[str, list] = {"t_s": [], "operator": [], "instances": [], "starting": [], "hosts": []}
    hosts: Dict[str, list] = {"t_s": [], "leased": [], "ready": []}
    edges: Dict[str, list] = {"t_s": [], "source": [], "target": [], "items": []}
    stats: Dict[str, list] = {"t_s": [], "operator": [], "instance": [], "processed": [], "utilisation": []}
    for e in ends:
        sl, te = slice(e - step, e), float(e)
        n, up = int(parallel[e - 1]), int(running[e - 1])
        proc["t_s"].append(te)
        proc["operator"].append(JOB_OPERATOR)
        proc["items"].append(int(round(thr[sl].sum())))
        queues["t_s"].append(te)
        queues["operator"].append(JOB_OPERATOR)
        queues["depth"].append(int(round(lag[e - 1])))
        inst["t_s"].append(te)
        inst["operator"].append(JOB_OPERATOR)
        inst["instances"].append(up)
        inst["starting"].append(n - up)
        inst["hosts"].append(n)
        hosts["t_s"].append(te)
        hosts["leased"].append(n)
        hosts["ready"].append(up)
        edges["t_s"].append(te)
        edges["source"].append("source")
        edges["target"].append(JOB_OPERATOR)
        edges["items"].append(int(arrivals[sl].sum()))
        for w in range(n):
            c = cpu[sl, w]
            c = c[np.isfinite(c)]
            stats["t_s"].append(te)
            stats["operator"].append(JOB_OPERATOR)
            stats["instance"].append(worker_name(w))
            stats["processed"].append(int(round(thr[sl, w].sum())))
            stats["utilisation"].append(float(c.mean()) if c.size else 0.0)
    tables: Dict[str, Dict[str, list]] = {
        "load": {"t_s": [float(s + 1) for s in range(D)], "machines": [0] * D, "source": ["source"] * D,
                 "items": np.asarray(arrivals).astype(np.int64).tolist(), "lateness_ms": [0.0] * D},
        "processed": proc, "queues": queues, "instances": inst, "hosts": hosts, "edges": edges,
        "instance_stats": stats,
        "latency": {"t_s": list(lat_t), "operator": [JOB_OPERATOR] * len(lat_t), "latency_ms": list(lat_ms)},
        "actions": actions_table(records, policy.name),
        "rescales": dict(rescales),
        # the platform's report reads these; job mode has no per-operator duration samples and no VMs
        "samples": {"t_s": [], "operator": [], "instance": [], "duration_ms": []},
        "leases": {k: [] for k in LEASE_COLUMNS},
    }
    tables.update(policy.records())
    return tables
