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
  workers are not ready until the restart ends. With `job.start_delay_s` a scale-out first starts
  its new workers for ~U(lo, hi) s while the old parallelism keeps processing (a real engine starts
  a TaskManager, then restarts the job briefly); the rescale's downtime counts both.
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
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from testbed.actions import ActionRecord
from testbed.config import ExperimentConfig
from testbed.job_config import JobConfig
from testbed.job_tables import job_tables, new_rescales
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
    def __init__(self, cfg: ExperimentConfig, policy: Policy, pattern: Any, seed: int) -> None:
        self.cfg = cfg
        self.job: JobConfig = cfg.job
        self.policy = policy
        self.duration = int(round(cfg.duration_min * 60.0))
        rates = getattr(pattern, "rates", None)
        if rates is None:
            raise ValueError(f"job mode needs a workload with rates (items/s per second), got {type(pattern).__name__}")
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
        top = self.job.max_scaleout
        start = self.policy.initial_parallelism(top)
        st = _RunState.start(self, int(start or self.job.initial_parallelism))
        interval = self.policy.interval_s
        next_decision = float(interval) if interval else math.inf
        noise = self.rng_cpu.standard_normal((self.duration, top)) * self.job.cpu_noise
        for t in range(self.duration):
            if st.pending is not None and t >= st.pending[0]:  # the new workers have started
                self._restart(st, t - 1, st.pending[1], st.pending[2])
            if t < st.down_until:
                self._stopped_second(st, t)
            else:
                self._running_second(st, t, noise[t])
            st.lag[t] = self.cum[t] - st.P
            st.parallel[t] = st.n
            self._track_recovery(st, t)
            # the controller, at the end of second t
            if t + 1 >= next_decision - 1e-9 and t + 1 < self.duration:
                assert interval  # next_decision is finite only with an interval
                next_decision += interval
                self._decide(st, t)
        tables = job_tables(int(round(self.cfg.runtime.monitoring_s)), self.arrivals, st.thr, st.cpu, st.lag,
                            st.parallel, st.running, st.lat_t, st.lat_ms, st.records, self.policy, st.rescales)
        return RunResult(tables, float(self.duration), self._details(st.P))

    def _details(self, processed: float) -> dict:
        top = self.job.max_scaleout
        details = {"job": {"mu": self.mu, "capacity": {str(p): self.capacity(p) for p in range(1, top + 1)},
                           "peak_rate": float(self.rates.max()), "latency_sample_every": self.sample_every,
                           "items": float(self.cum[-1]), "unprocessed_at_end": float(self.cum[-1] - processed)}}
        controller = self.policy.run_details()
        if controller is not None:
            details["controller"] = controller
        return details

    def _stopped_second(self, st: _RunState, t: int) -> None:
        st.cpu[t, :st.n] = 0.0
        st.uptime[t] = 0.0
        st.running[t] = 0

    def _running_second(self, st: _RunState, t: int, noise: np.ndarray) -> None:
        n = st.n
        T = min(self.cum[t] - st.P, st.cap)
        if T > 0:
            self._sample_latency(st.P, st.P + T, t, self.sample_every, st.lat_k, st.lat_t, st.lat_ms)
        st.P += T
        st.thr[t, :n] = T * st.shares
        st.cpu[t, :n] = np.clip(T * st.shares / self.mu + noise[:n], 0.0, 1.0)
        st.uptime[t] = t + 1 - st.up_since
        st.running[t] = n
        if t + 1 >= st.next_ckpt:
            st.ckpt_offset = st.P
            st.next_ckpt += self.job.checkpoint_s

    def _track_recovery(self, st: _RunState, t: int) -> None:
        """A rescale has recovered once the lag is back to what it was before (or one second's arrivals)."""
        i = st.pending_recovery
        if i is not None and t >= st.down_until and st.lag[t] <= max(st.rescales["lag_before"][i], self.arrivals[t]):
            st.rescales["recovered_s"][i] = t + 1 - st.rescales["t_s"][i]
            st.pending_recovery = None

    def _decide(self, st: _RunState, t: int) -> None:
        top = self.job.max_scaleout
        snap = self._snapshot(t, st.n, top, st.thr, st.cpu, st.lag, st.uptime, st.ready_from)
        rescale = job_rescale(st.n, self.policy.decide_job(snap), top)
        if rescale is None or t + 1 < st.down_until or st.pending is not None:
            return
        target, actions = rescale
        now = float(t + 1)
        for a in actions:
            inst = a.instance if isinstance(a, ScaleDown) else None
            st.records.append(ActionRecord(now, a.kind, JOB_OPERATOR, inst, None, None, a.reason))
        lo, hi = self.job.start_delay_s
        if target > st.n and hi > 0:  # drawn only when configured: the downtime stream stays as it was
            delay = int(round(self.rng_down.uniform(lo, hi)))
            if delay > 0:
                st.pending = (t + 1 + delay, target, delay)
                return
        self._restart(st, t, target)

    def _restart(self, st: _RunState, t: int, target: int, started_s: int = 0) -> None:
        """Stop the world: roll back to the checkpoint, stay down for the drawn downtime, resume with
        target. `started_s`: the seconds the new workers took to start before (counted in the downtime
        and the rescale's time, which is the decision's)."""
        j, n = self.job, st.n
        st.pending = None
        now = float(t + 1 - started_s)
        lo, hi = j.downtime_out_s if target > n else j.downtime_in_s
        down = max(1, int(round(self.rng_down.uniform(lo, hi))))
        replayed = st.P - st.ckpt_offset
        st.P = st.ckpt_offset
        while st.lat_k and st.lat_k[-1] >= st.ckpt_offset:  # processed again after the restart
            st.lat_k.pop(), st.lat_t.pop(), st.lat_ms.pop()
        started = f"new workers started in {started_s} s, then " if started_s else ""
        st.records.append(ActionRecord(float(t + 1), "restart", JOB_OPERATOR, None, None, None,
                                       f"stop the world {n} -> {target} workers: {started}downtime {down} s, "
                                       f"replay of {int(replayed)} item(s) since the checkpoint"))
        for key, value in (("t_s", now), ("from_n", n), ("to_n", target), ("downtime_s", float(started_s + down)),
                           ("replayed", int(replayed)), ("lag_before", float(st.lag[t])),
                           ("recovered_s", math.nan), ("capacity_before", st.cap)):
            st.rescales[key].append(value)
        for w in range(n, target):
            st.ready_from[w] = t + 1 + down
        for w in range(target, n):
            st.ready_from.pop(w, None)
        st.set_parallelism(self, target)
        st.rescales["capacity_after"].append(st.cap)
        st.down_until = t + 1 + down
        st.up_since = st.down_until
        st.next_ckpt = st.down_until + j.checkpoint_s
        st.ckpt_offset = st.P
        st.pending_recovery = len(st.rescales["t_s"]) - 1

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

    def _snapshot(self, t: int, n: int, top: int, thr: np.ndarray, cpu: np.ndarray, lag: np.ndarray,
                  uptime: np.ndarray, ready_from: Dict[int, int]) -> JobSnapshot:
        lo = max(0, t + 1 - self.job.window_s)
        sl = slice(lo, t + 1)
        workers = {f"w{w}": w for w in range(n)}
        return JobSnapshot(
            t=float(t + 1), parallelism=n, max_scaleout=top, checkpoint_s=self.job.checkpoint_s, lag=float(lag[t]),
            seconds=np.arange(lo + 1, t + 2, dtype=float), workload=self.arrivals[sl].copy(),
            throughput={k: thr[sl, w].copy() for k, w in workers.items()},
            cpu={k: cpu[sl, w].copy() for k, w in workers.items()}, uptime=uptime[sl].copy(),
            ready={k: ready_from.get(w, 0) <= t + 1 for k, w in workers.items()})




@dataclass
class _RunState:
    """What a job simulation carries from second to second, and the per-second series it records."""

    n: int  # parallelism
    shares: np.ndarray  # s_w of the n workers
    cap: float  # the job's capacity at n workers
    thr: np.ndarray  # (seconds, max workers): items processed per worker
    cpu: np.ndarray
    lag: np.ndarray
    uptime: np.ndarray
    parallel: np.ndarray
    running: np.ndarray
    ready_from: Dict[int, int]
    P: float = 0.0  # items processed (the consumer offset); rolls back to the checkpoint on a restart
    ckpt_offset: float = 0.0
    next_ckpt: float = 0.0
    down_until: int = 0
    up_since: int = 0
    pending_recovery: Optional[int] = None
    pending: Optional[Tuple[int, int, int]] = None  # a scale-out whose workers start: (restart at, target, delay)
    lat_k: List[float] = field(default_factory=list)  # sampled item indices, increasing
    lat_t: List[float] = field(default_factory=list)
    lat_ms: List[float] = field(default_factory=list)
    records: List[ActionRecord] = field(default_factory=list)
    rescales: Dict[str, list] = field(default_factory=new_rescales)

    @classmethod
    def start(cls, sim: JobSimulation, n: int) -> _RunState:
        D, top = sim.duration, sim.job.max_scaleout
        shares = worker_shares(sim.weights, sim.key_group, n, sim.job.key_groups)
        return cls(n=n, shares=shares, cap=sim.mu / shares.max(), thr=np.zeros((D, top)),
                   cpu=np.full((D, top), np.nan), lag=np.zeros(D), uptime=np.zeros(D),
                   parallel=np.zeros(D, dtype=np.int64), running=np.zeros(D, dtype=np.int64),
                   ready_from={w: 0 for w in range(n)}, next_ckpt=sim.first_checkpoint)

    def set_parallelism(self, sim: JobSimulation, n: int) -> None:
        self.n = n
        self.shares = worker_shares(sim.weights, sim.key_group, n, sim.job.key_groups)
        self.cap = sim.mu / self.shares.max()
