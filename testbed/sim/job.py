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
* **Queueing below capacity** (`job.service_cv`, `job.batch_wait_ms`; both 0 by default, a fluid
  that queues only above capacity): the job's capacity in second t is C·(1 + cv·ε_t), ε_t standard
  normal from the stream `job/service` (at least 0; each draw held for `job.service_period_s`
  seconds, so that a compressed run keeps the engine's second), so the source backlog forms and drains in the
  seconds where the load meets a slow second, which raises latency before saturation; and an item
  processed in a second of utilisation ρ waits `batch_wait_ms`·ρ more for the items that arrived
  in the same batch (a sentence's words, a network buffer's flush).
* **The CPU reading** of worker w is its true utilisation T·s_w/μ, by default of the second itself;
  as an engine's busy-time metric gives it, the mean over the last `job.cpu_window_s` seconds as of
  its last update (every `job.cpu_update_s` s) `job.cpu_lag_s` seconds before (Flink: a 60 s
  window updated every 5 s); then `job.cpu_bias` and the white noise `job.cpu_noise`, in [0, 1].
  With `job.cpu_reading=cgroup` what is read is the TaskManager's CPU over its limit instead:
  `job.cgroup_overhead` + (1 − overhead)·utilisation (Flink's own work besides the counted records,
  measured on the cpu mode's load ramp), windowed, biased and noised as above.
* **Controllers** see a `JobSnapshot` (testbed/policies/job_inputs.py) every `policy.interval_s`
  seconds (Daedalus 60 s, HPA 15 s; a static deployment is never asked). The model is an engine of
  the job loop (testbed/job/loop.py) on a virtual clock: `SimJobEngine` below.

The run writes the usual event-log tables (load, processed, queues, instances, hosts, edges,
instance_stats, latency, actions) for operator "job", the controller's own tables (forecasts,
capacity, recovery) and `rescales` (each restart with its true downtime, replay and recovery).
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from testbed.config import ExperimentConfig
from testbed.job.engine import Loss, Second, StepClock
from testbed.job.ledger import Change, JobLedger
from testbed.job.loop import JobLoop, LoopSettings
from testbed.job.tables import job_tables
from testbed.job_config import JobConfig
from testbed.policies.contract import Policy
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


def reading_span(t: int, lag: int, window: int, update: int) -> Tuple[int, int]:
    """The seconds [lo, hi) a windowed metric read in second t covers: its last update (every
    `update` s) `lag` s before, over `window` s. hi = 0: no update yet."""
    hi = max(0, (t - lag + 1) // update * update)
    return max(0, hi - window), hi


class JobSimulation:
    def __init__(self, cfg: ExperimentConfig, policy: Policy, pattern: Any, seed: int) -> None:
        self.cfg = cfg
        self.job: JobConfig = cfg.job
        self.policy = policy
        self.seed = seed
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

    def run(self) -> RunResult:
        """The model on the job loop, one step per second on a virtual clock."""
        top = self.job.max_scaleout
        start = self.policy.initial_parallelism(top)
        ledger = JobLedger()
        engine = SimJobEngine(self, ledger, int(start or self.job.initial_parallelism))
        settings = LoopSettings(duration=self.duration, top=top, window_s=self.job.window_s,
                                checkpoint_s=self.job.checkpoint_s, track_during_change=True)
        loop = JobLoop(engine, self.policy, settings, StepClock(), ledger)
        loop.start(engine.n)
        loop.run()
        s = loop.series
        tables = job_tables(int(round(self.cfg.runtime.monitoring_s)), s.arrivals, s.thr, s.cpu, s.lag,
                            s.parallel, s.running, engine.lat_t, engine.lat_ms, ledger.records, self.policy,
                            ledger.rescales)
        return RunResult(tables, float(self.duration), self._details(engine.P))

    def _details(self, processed: float) -> dict:
        top = self.job.max_scaleout
        details = {"job": {"mu": self.mu, "capacity": {str(p): self.capacity(p) for p in range(1, top + 1)},
                           "peak_rate": float(self.rates.max()), "latency_sample_every": self.sample_every,
                           "items": float(self.cum[-1]), "unprocessed_at_end": float(self.cum[-1] - processed)}}
        controller = self.policy.run_details()
        if controller is not None:
            details["controller"] = controller
        return details

    def sample_latency(self, p0: float, p1: float, t: int, N: float, ks: list, ts: list, ms: list,
                       extra_ms: float = 0.0) -> None:
        """Every N-th item among those processed in second t (items p0..p1): when it was done, and
        its latency since its arrival plus the base latency and `extra_ms`."""
        first = math.ceil(p0 / N) * N
        if first >= p1:
            return
        k = np.arange(first, p1, N)
        done = t + (k - p0) / (p1 - p0)
        s = np.searchsorted(self.cum, k, side="right")  # the second item k arrived in
        before = np.where(s > 0, self.cum[np.maximum(s - 1, 0)], 0.0)
        arrived = s + (k - before) / np.maximum(self.arrivals[np.minimum(s, len(self.arrivals) - 1)], 1.0)
        lat = np.maximum(done - arrived, 0.0) * 1000.0 + (self.job.base_latency_ms + extra_ms)
        ks.extend(k.tolist())
        ts.extend(done.tolist())
        ms.extend(lat.tolist())


class SimJobEngine:
    """The job model as the job loop's engine: it advances one second per measurement, and a
    rescale stops the world for a drawn downtime (after the new workers' start delay, if any)."""

    def __init__(self, sim: JobSimulation, ledger: JobLedger, n: int) -> None:
        self.sim, self.job, self.ledger = sim, sim.job, ledger
        self.top = sim.job.max_scaleout
        self.noise = sim.rng_cpu.standard_normal((sim.duration, self.top)) * sim.job.cpu_noise
        j = sim.job
        # the capacity's factor per second (drawn only when asked for: the other streams stay as they were)
        self.service = self._service_factors(sim.seed, sim.duration) if j.service_cv > 0 else None
        self.cpu_lag = int(round(j.cpu_lag_s))
        delayed = self.cpu_lag > 0 or j.cpu_window_s > 1 or j.cpu_update_s > 1
        self.util = np.zeros((sim.duration, self.top)) if delayed else None  # the true utilisation
        self.view: Optional[Tuple[int, np.ndarray]] = None  # the reading's last update: (its end, its value)
        self.n = n
        self.shares = worker_shares(sim.weights, sim.key_group, n, sim.job.key_groups)
        self.cap = sim.mu / self.shares.max()  # the job's capacity at n workers
        self.ready_from: Dict[int, int] = {w: 0 for w in range(n)}
        self.P = 0.0  # items processed (the consumer offset); rolls back to the checkpoint on a restart
        self.ckpt_offset = 0.0
        self.next_ckpt = sim.first_checkpoint
        self.down_until = 0
        self.up_since = 0
        self.lag = 0.0  # at the end of the last second
        self.k = -1  # the last second observed
        self.second: Optional[Second] = None
        # a scale-out whose new workers are starting: (restart at, target, delay)
        self.pending: Optional[Tuple[int, int, int]] = None
        self.lat_k: List[float] = []  # sampled item indices, increasing
        self.lat_t: List[float] = []
        self.lat_ms: List[float] = []

    def set_parallelism(self, n: int) -> None:
        self.n = n
        self.shares = worker_shares(self.sim.weights, self.sim.key_group, n, self.job.key_groups)
        self.cap = self.sim.mu / self.shares.max()

    # -- the engine interface ------------------------------------------------------------------
    def start(self, n: int) -> None:
        """The model starts running at its initial parallelism."""

    def observe(self, k: int) -> None:
        """Advances the model by second k."""
        self.k = k
        if self.pending is not None and k >= self.pending[0]:  # the new workers have started
            self._restart(k - 1, self.pending[1], self.pending[2])
        thr, cpu = np.zeros(self.top), np.full(self.top, np.nan)
        if k < self.down_until:
            cpu[:self.n] = 0.0
            uptime, running = 0.0, 0
        else:
            uptime, running = self._running_second(k, thr, cpu), self.n
        self.lag = self.sim.cum[k] - self.P
        self.second = Second(arrivals=self.sim.arrivals[k], thr=thr, cpu=cpu, lag=self.lag, uptime=uptime,
                             parallel=self.n, running=running)

    def measure(self, k: int) -> Optional[Second]:
        return self.second

    def parallelism(self) -> int:
        return self.n

    def ready(self, t: float) -> Dict[str, bool]:
        return {f"w{w}": self.ready_from.get(w, 0) <= t for w in range(self.n)}

    def rescale(self, k: int, target: int) -> Optional[int]:
        lo, hi = self.job.start_delay_s
        if target > self.n and hi > 0:  # drawn only when configured: the downtime stream stays as it was
            delay = int(round(self.sim.rng_down.uniform(lo, hi)))
            if delay > 0:
                self.pending = (k + 1 + delay, target, delay)
                return None
        return self._restart(k, target)

    def settled(self, target: int) -> bool:
        return self.pending is None and self.k + 1 >= self.down_until

    def settle(self, change: Change, now: float, t: Optional[float]) -> None:
        """Nothing to learn: the model drew the downtime."""

    def fatal(self, now: float) -> Optional[str]:
        return None

    def losses(self, now: float) -> List[Loss]:
        return []

    def replace(self, loss: Loss, now: float) -> str:
        raise NotImplementedError("the model loses no workers")

    def stuck(self, now: float, lost: List[str]) -> List[Loss]:
        return []

    def state(self) -> str:
        return f"parallelism {self.n}, down until t={self.down_until} s"

    def change_bound_s(self) -> float:
        return math.inf  # a modelled change always finishes

    def stop(self) -> None:
        """Nothing runs."""

    # -- the model -----------------------------------------------------------------------------
    def _running_second(self, t: int, thr: np.ndarray, cpu: np.ndarray) -> float:
        """Second t at the current parallelism: processes what it can, samples latency, checkpoints;
        returns the uptime."""
        n, sim = self.n, self.sim
        cap = self.cap if self.service is None else self.cap * self.service[t]
        T = min(sim.cum[t] - self.P, cap)
        if T > 0:
            wait = self.job.batch_wait_ms * min(1.0, T / cap) if self.job.batch_wait_ms > 0 else 0.0
            sim.sample_latency(self.P, self.P + T, t, sim.sample_every, self.lat_k, self.lat_t, self.lat_ms, wait)
        self.P += T
        thr[:n] = T * self.shares
        cpu[:n] = self._cpu_reading(t, T * self.shares / sim.mu)
        if t + 1 >= self.next_ckpt:
            self.ckpt_offset = self.P
            self.next_ckpt += self.job.checkpoint_s
        return t + 1 - self.up_since

    def _service_factors(self, seed: int, duration: int) -> np.ndarray:
        """The capacity's factor per second: 1 + cv x a standard normal (at least 0), each draw held
        for `service_period_s` seconds."""
        period = self.job.service_period_s
        draws = stream(seed, "job/service").standard_normal(-(-duration // period))
        return np.maximum(0.0, 1.0 + np.repeat(draws, period)[:duration] * self.job.service_cv)

    def _cpu_reading(self, t: int, util: np.ndarray) -> np.ndarray:
        """What the controllers read as CPU in second t: the utilisation (or, read from the cgroup, the
        TaskManager's share of its limit), its mean over `cpu_window_s` seconds up to its last update
        (every `cpu_update_s`) `cpu_lag_s` before (the current one while there is no such update
        yet), plus the bias and the noise, in [0, 1]."""
        n, j = len(util), self.job
        if j.cpu_reading == "cgroup":  # the whole TaskManager: its overhead, then the work in proportion
            util = j.cgroup_overhead + (1.0 - j.cgroup_overhead) * util
        if self.util is not None:
            self.util[t, :n] = util
            lo, hi = reading_span(t, self.cpu_lag, j.cpu_window_s, j.cpu_update_s)
            if hi > 0:
                if self.view is None or self.view[0] != hi or len(self.view[1]) != n:  # a new update
                    self.view = (hi, self.util[lo:hi, :n].mean(axis=0))
                util = self.view[1]
        return np.clip(util + j.cpu_bias + self.noise[t, :n], 0.0, 1.0)

    def _restart(self, t: int, target: int, started_s: int = 0) -> int:
        """Stop the world after second t: roll back to the checkpoint, stay down for the drawn
        downtime, resume with target. `started_s`: the seconds the new workers took to start before
        (counted in the downtime and the rescale's time, which is the decision's). Returns the
        rescale's row."""
        j, n = self.job, self.n
        self.pending = None
        now = float(t + 1 - started_s)
        lo, hi = j.downtime_out_s if target > n else j.downtime_in_s
        down = max(1, int(round(self.sim.rng_down.uniform(lo, hi))))
        replayed = self.P - self.ckpt_offset
        self.P = self.ckpt_offset
        while self.lat_k and self.lat_k[-1] >= self.ckpt_offset:  # processed again after the restart
            self.lat_k.pop(), self.lat_t.pop(), self.lat_ms.pop()
        started = f"new workers started in {started_s} s, then " if started_s else ""
        self.ledger.record(float(t + 1), "restart", f"stop the world {n} -> {target} workers: {started}downtime "
                                                    f"{down} s, replay of {int(replayed)} item(s) since the checkpoint")
        cap_before = self.cap
        for w in range(n, target):
            self.ready_from[w] = t + 1 + down
        for w in range(target, n):
            self.ready_from.pop(w, None)
        self.set_parallelism(target)
        row = self.ledger.open_rescale(now, n, target, float(self.lag), cap_before, self.cap,
                                       downtime_s=float(started_s + down), replayed=int(replayed))
        self.down_until = t + 1 + down
        self.up_since = self.down_until
        self.next_ckpt = self.down_until + j.checkpoint_s
        self.ckpt_offset = self.P
        self.ledger.recovering = row
        return row
