"""Job mode (docs/papers/daedalus.md#simulator): the Daedalus paper's setting at 1 s steps.

* **Keys and skew.** K keys with weights (uniform, or Zipf word frequencies) hash to one of 128 key
  groups; with n workers, key group kg belongs to worker kg·n // 128, as Flink assigns them. Worker
  w's share s_w is the weight of its keys. A worker processes μ items/s at CPU 1; the hottest worker
  backpressures the job, so the job's capacity is μ / max s_w. The job processes
  T = min(backlog, μ / max s_w) per second; worker w processes T·s_w at CPU T·s_w/μ + noise.
* **Rates** are normalised so that the workload's peak is 0.9 × C(12) (`job.peak_fraction`,
  `job.capacity_workers`): μ = peak · max s_w(12) / 0.9.
* **Rescale = stop the world.** When the controller sets a new parallelism, the job stops for a
  downtime ~U(20, 40) s (scale-out) or ~U(10, 20) s (scale-in); it restarts from its last
  checkpoint (every 30 s, random phase), so everything processed since is processed again; arrivals
  queue at the source meanwhile; uptime restarts (the controllers' 120 s warm-up applies). New
  workers are not ready until the restart ends.
* **Latency** of every N-th item (about `job.latency_samples` per run): the time from its arrival to
  the end of its processing (FIFO through the source backlog, items evenly spread within a second)
  plus `job.base_latency_ms`; an item processed before a restart and processed again counts once,
  at its final processing (exactly-once sinks commit at checkpoints).
* **Controllers** see a `JobSnapshot` (testbed/policies/job_inputs.py) every `policy.interval_s`
  seconds (Daedalus 60 s, HPA 15 s; a static deployment is never asked).

The run writes the usual event-log tables (load, processed, queues, instances, hosts, edges,
instance_stats, latency, actions) for operator "job", the controller's own tables (forecasts,
capacity, recovery) and `rescales` (each restart with its true downtime, replay and recovery).
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional

import numpy as np

from testbed.actions import ActionRecord
from testbed.config import ExperimentConfig
from testbed.job_config import JobConfig
from testbed.job_tables import job_tables
from testbed.model import ScaleDown
from testbed.policies.contract import Policy
from testbed.policies.job_inputs import JOB_OPERATOR, JobSnapshot
from testbed.policies.scaling import job_rescale
from testbed.rng import stream
from testbed.run_result import RunResult


def key_weights(cfg: JobConfig) -> np.ndarray:
    if cfg.key_distribution == "zipf":
        w = 1.0 / np.arange(1, cfg.keys + 1, dtype=float) ** cfg.zipf_s
    else:
        w = np.ones(cfg.keys)
    return w / w.sum()


def worker_shares(weights: np.ndarray, key_group: np.ndarray, n: int, groups: int) -> np.ndarray:
    """s_w for n workers: the weight of the keys whose key group kg has kg·n // groups = w."""
    return np.bincount(key_group * n // groups, weights=weights, minlength=n)[:n]


class JobSimulation:
    def __init__(self, cfg: ExperimentConfig, policy: Policy, pattern, seed: int):
        self.cfg = cfg
        self.job: JobConfig = cfg.job
        self.policy = policy
        self.duration = int(round(cfg.duration_min * 60.0))
        rates = getattr(pattern, "rates", None)
        if rates is None:
            raise ValueError(f"job mode needs a rate workload (pattern kind daedalus), got {type(pattern).__name__}")
        rates = np.asarray(rates, dtype=float)
        if len(rates) < self.duration:
            rates = np.concatenate([rates, np.full(self.duration - len(rates), rates[-1])])
        self.rates = rates[: self.duration]
        cum = np.floor(np.cumsum(self.rates))
        self.arrivals = np.diff(np.concatenate([[0.0], cum]))  # whole items per second
        self.cum = cum  # items arrived by the end of each second
        j = self.job
        self.weights = key_weights(j)
        self.key_group = stream(seed, "job/keys").integers(0, j.key_groups, j.keys)
        peak = float(self.rates.max())
        top12 = float(worker_shares(self.weights, self.key_group, j.capacity_workers, j.key_groups).max())
        self.mu = peak * top12 / j.peak_fraction if peak > 0 else 1.0
        self.rng_down = stream(seed, "job/downtime")
        self.rng_cpu = stream(seed, "job/cpu")
        self.first_checkpoint = float(stream(seed, "job/checkpoint").uniform(0.0, j.checkpoint_s))
        total = float(cum[-1]) if len(cum) else 0.0
        self.sample_every = max(1.0, math.floor(total / j.latency_samples)) if total > 0 else 1.0

    def capacity(self, n: int) -> float:
        """The true capacity of n workers: μ / max s_w."""
        return self.mu / float(worker_shares(self.weights, self.key_group, n, self.job.key_groups).max())

    # -- the run ------------------------------------------------------------------------------
    def run(self) -> RunResult:
        j, D, top = self.job, self.duration, self.job.max_scaleout
        start = self.policy.initial_parallelism(top)
        n = int(start or j.initial_parallelism)
        shares = worker_shares(self.weights, self.key_group, n, j.key_groups)
        cap = self.mu / shares.max()
        interval = self.policy.interval_s
        next_decision = float(interval) if interval else math.inf
        thr = np.zeros((D, top))
        cpu = np.full((D, top), np.nan)
        lag = np.zeros(D)
        uptime = np.zeros(D)
        parallel = np.zeros(D, dtype=np.int64)
        running = np.zeros(D, dtype=np.int64)
        P = 0.0  # items processed (the consumer offset); rolls back to the checkpoint on a restart
        ckpt_offset, next_ckpt = 0.0, self.first_checkpoint
        down_until, up_since = 0, 0
        ready_from: Dict[int, int] = {w: 0 for w in range(n)}
        lat_k: List[float] = []  # sampled item indices, increasing
        lat_t: List[float] = []
        lat_ms: List[float] = []
        records: List[ActionRecord] = []
        rescales: Dict[str, list] = {k: [] for k in ("t_s", "from_n", "to_n", "downtime_s", "replayed", "lag_before",
                                                     "recovered_s", "capacity_before", "capacity_after")}
        pending_recovery: Optional[int] = None
        N = self.sample_every
        noise = self.rng_cpu.standard_normal((D, top)) * j.cpu_noise
        for t in range(D):
            if t < down_until:
                cpu[t, :n] = 0.0
                uptime[t] = 0.0
                running[t] = 0
            else:
                avail = self.cum[t] - P
                T = min(avail, cap)
                if T > 0:
                    self._sample_latency(P, P + T, t, N, lat_k, lat_t, lat_ms)
                P += T
                thr[t, :n] = T * shares
                cpu[t, :n] = np.clip(T * shares / self.mu + noise[t, :n], 0.0, 1.0)
                uptime[t] = t + 1 - up_since
                running[t] = n
                if t + 1 >= next_ckpt:
                    ckpt_offset = P
                    next_ckpt += j.checkpoint_s
            lag[t] = self.cum[t] - P
            parallel[t] = n
            if (pending_recovery is not None and t >= down_until
                    and lag[t] <= max(rescales["lag_before"][pending_recovery], self.arrivals[t])):
                rescales["recovered_s"][pending_recovery] = t + 1 - rescales["t_s"][pending_recovery]
                pending_recovery = None
            # the controller, at the end of second t
            if t + 1 >= next_decision - 1e-9 and t + 1 < D:
                assert interval  # next_decision is finite only with an interval
                next_decision += interval
                snap = self._snapshot(t, n, top, thr, cpu, lag, uptime, ready_from)
                rescale = job_rescale(n, self.policy.decide_job(snap), top)
                if rescale is not None and t + 1 >= down_until:
                    target, actions = rescale
                    now = float(t + 1)
                    for a in actions:
                        inst = a.instance if isinstance(a, ScaleDown) else None
                        records.append(ActionRecord(now, a.kind, JOB_OPERATOR, inst, None, None, a.reason))
                    lo, hi = j.downtime_out_s if target > n else j.downtime_in_s
                    down = max(1, int(round(self.rng_down.uniform(lo, hi))))
                    replayed = P - ckpt_offset
                    P = ckpt_offset
                    while lat_k and lat_k[-1] >= ckpt_offset:  # processed again after the restart
                        lat_k.pop(), lat_t.pop(), lat_ms.pop()
                    records.append(ActionRecord(now, "restart", JOB_OPERATOR, None, None, None,
                                                f"stop the world {n} -> {target} workers: downtime {down} s, "
                                                f"replay of {int(replayed)} item(s) since the checkpoint"))
                    for key, value in (("t_s", now), ("from_n", n), ("to_n", target), ("downtime_s", float(down)),
                                       ("replayed", int(replayed)), ("lag_before", float(lag[t])),
                                       ("recovered_s", math.nan),
                                       ("capacity_before", cap)):
                        rescales[key].append(value)
                    for w in range(n, target):
                        ready_from[w] = t + 1 + down
                    for w in range(target, n):
                        ready_from.pop(w, None)
                    n = target
                    shares = worker_shares(self.weights, self.key_group, n, j.key_groups)
                    cap = self.mu / shares.max()
                    rescales["capacity_after"].append(cap)
                    down_until = t + 1 + down
                    up_since = down_until
                    next_ckpt = down_until + j.checkpoint_s
                    ckpt_offset = P
                    pending_recovery = len(rescales["t_s"]) - 1
        tables = job_tables(int(round(self.cfg.runtime.monitoring_s)), self.arrivals, thr, cpu, lag, parallel, running,
                            lat_t, lat_ms, records, self.policy, rescales)
        details = {"job": {"mu": self.mu, "capacity": {str(p): self.capacity(p) for p in range(1, top + 1)},
                           "peak_rate": float(self.rates.max()), "latency_sample_every": N,
                           "items": float(self.cum[-1]), "unprocessed_at_end": float(self.cum[-1] - P)}}
        controller = self.policy.run_details()
        if controller is not None:
            details["controller"] = controller
        return RunResult(tables, float(D), details)

    def _sample_latency(self, p0: float, p1: float, t: int, N: float, ks: list, ts: list, ms: list) -> None:
        first = math.ceil(p0 / N) * N
        if first >= p1:
            return
        k = np.arange(first, p1, N)
        done = t + (k - p0) / (p1 - p0)
        s = np.searchsorted(self.cum, k, side="right")  # the second item k arrived in
        before = np.where(s > 0, self.cum[np.maximum(s - 1, 0)], 0.0)
        arrived = s + (k - before) / np.maximum(self.arrivals[np.minimum(s, len(self.arrivals) - 1)], 1.0)
        lat = np.maximum(done - arrived, 0.0) * 1000.0 + self.job.base_latency_ms
        ks.extend(k.tolist())
        ts.extend(done.tolist())
        ms.extend(lat.tolist())

    def _snapshot(self, t: int, n: int, top: int, thr, cpu, lag, uptime, ready_from) -> JobSnapshot:
        lo = max(0, t + 1 - self.job.window_s)
        sl = slice(lo, t + 1)
        workers = {f"w{w}": w for w in range(n)}
        return JobSnapshot(
            t=float(t + 1), parallelism=n, max_scaleout=top, checkpoint_s=self.job.checkpoint_s, lag=float(lag[t]),
            seconds=np.arange(lo + 1, t + 2, dtype=float), workload=self.arrivals[sl].copy(),
            throughput={k: thr[sl, w].copy() for k, w in workers.items()},
            cpu={k: cpu[sl, w].copy() for k, w in workers.items()}, uptime=uptime[sl].copy(),
            ready={k: ready_from.get(w, 0) <= t + 1 for k, w in workers.items()})

