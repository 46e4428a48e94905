"""One Daedalus controller (docs/papers/daedalus.md): the MAPE-K loop over a window of 1 s samples.
It owns the capacity model, the forecaster, the anomaly statistics and the decision state, and keeps
what it measured (forecasts, capacities, recoveries) as records for the event log.

Inputs are plain arrays, so the same controller serves job mode (the whole job) and operator mode
(one operator type)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional

import numpy as np

from testbed.policies.daedalus.anomaly import RunningStats, observed_recovery, recovery_end
from testbed.policies.daedalus.capacity import CapacityModel
from testbed.policies.daedalus.decision import NEVER, Decision, DecisionInputs, DecisionSettings, plan
from testbed.policies.daedalus.forecast import Forecaster
from testbed.policies.daedalus.recovery import predict_recovery_time

EWMA_TICK_S = 5
EWMA_ALPHA = 1.0 - math.exp(-5.0 / 60.0)


@dataclass
class LoopWindow:
    """One loop's window (oldest first, 1 s apart, the last second ending at t)."""

    t: float
    p_cur: int
    lag: float
    checkpoint_s: float
    seconds: np.ndarray
    workload: np.ndarray
    throughput: Mapping[str, np.ndarray]
    cpu: Mapping[str, np.ndarray]
    uptime: np.ndarray


@dataclass
class Outcome:
    target: Optional[int]
    reason: str
    decision: Optional[Decision] = None


@dataclass
class DaedalusController:
    settings: DecisionSettings
    capacity: CapacityModel
    forecaster: Forecaster
    warmup_s: float = 120.0
    K_s: float = 0.0  # replay window; 0 = the runtime's checkpoint interval
    workload_metric: str = "exact"  # or ewma1m
    downtime_out: int = 30
    downtime_in: int = 15
    min_downtime: int = 1
    post_rescale_pause_s: float = 0.0
    name: str = "daedalus"
    last_rescale: float = NEVER
    last_seen: float = -math.inf
    diffs: RunningStats = field(default_factory=RunningStats)
    monitor: Optional[dict] = None  # the rescale whose recovery is being observed
    ewma: Optional[float] = None
    ewma_count: float = 0.0
    ewma_ticks: int = 0
    records: Dict[str, Dict[str, list]] = field(default_factory=lambda: {
        "forecasts": {"t_s": [], "controller": [], "model": [], "wape": [], "horizon_max": [], "mode": []},
        "capacity": {"t_s": [], "controller": [], "scaleout": [], "estimated": [], "observed": []},
        "recovery": {"t_s": [], "controller": [], "scaleout": [], "predicted_s": [], "observed_s": [],
                     "downtime_s": []},
    })

    # -- the loop -----------------------------------------------------------------------------
    def loop(self, w: LoopWindow) -> Outcome:
        if w.t - self.last_rescale < self.post_rescale_pause_s:
            return Outcome(None, "paused after a rescale")
        fresh = w.seconds > self.last_seen + 1e-9
        self.last_seen = float(w.seconds[-1]) if len(w.seconds) else self.last_seen
        workload = self._workload_series(w.seconds, w.workload, fresh)
        # capacity: samples of a warm job only, per worker
        warm = fresh & (w.uptime >= self.warmup_s)
        cpu, thr = {}, {}
        for wk, xs in w.cpu.items():
            ok = warm & np.isfinite(xs)
            cpu[wk] = np.asarray(xs)[ok]
            thr[wk] = np.asarray(w.throughput[wk])[ok]
        if any(len(v) for v in cpu.values()):
            self.capacity.update(cpu, thr, w.p_cur)
        self._book_capacity(w.t)
        # forecast
        forecast, kind = self.forecaster.loop(workload[fresh], workload)
        self._book_forecast(w.t, kind, forecast)
        # observed recovery of the last rescale
        total = np.sum([np.asarray(v) for v in w.throughput.values()],
                       axis=0) if w.throughput else np.zeros(len(w.seconds))
        diff = np.asarray(w.workload, dtype=float) - total
        self.diffs.add_all(diff[fresh])
        self._observe_recovery(w.seconds[fresh], diff[fresh])
        # decide
        k = int(self.K_s or w.checkpoint_s)
        inputs = DecisionInputs(
            t=w.t, p_cur=w.p_cur, last_rescale=self.last_rescale,
            workload=int(np.mean(workload)) if len(workload) else 0,
            forecast=forecast, capacity=self.capacity.capacity, lag=w.lag,
            replay=float(np.sum(workload[-k:])) if k > 0 else 0.0,
            downtime_out=self.downtime_out, downtime_in=self.downtime_in)
        d = plan(inputs, self.settings)
        if d.target is None or d.target == w.p_cur:
            return Outcome(None, d.branch, d)
        rt = d.rt.get(d.target)
        if rt is None:  # MaxScaleout fallback: its RT was not examined (every candidate failed earlier)
            dt = self.downtime_out if d.target >= w.p_cur else self.downtime_in
            lag_extra = w.lag if self.settings.backlog_includes_lag else 0.0
            rt = predict_recovery_time(self.capacity.capacity(d.target), forecast, inputs.replay, dt, lag_extra,
                                       self.settings.rt_semantics)
        self.last_rescale = w.t
        out = d.target > w.p_cur
        self.monitor = {"t": w.t, "scaleout": d.target, "predicted": rt, "out": out,
                        "downtime": self.downtime_out if out else self.downtime_in, "diffs": []}
        reason = (f"{self.name}: {d.branch}; W={inputs.workload}, C({w.p_cur})={self.capacity.capacity(w.p_cur)}, "
                  f"C({d.target})={self.capacity.capacity(d.target)}, forecast "
                  f"max={float(np.max(forecast)) if len(forecast) else 0:.0f} "
                  f"({kind}), predicted RT={rt} s, lag={int(w.lag)}")
        return Outcome(d.target, reason, d)

    # -- parts ----------------------------------------------------------------------------------
    def _workload_series(self, seconds: np.ndarray, workload: np.ndarray, fresh: np.ndarray) -> np.ndarray:
        if self.workload_metric != "ewma1m":
            return np.asarray(workload, dtype=float)
        # the broker's one-minute rate: an EWMA of the 5 s rate, ticked every 5 s
        out = np.empty(len(workload))
        for i, (s, v) in enumerate(zip(seconds, workload, strict=True)):
            if fresh[i]:
                self.ewma_count += float(v)
                if int(round(s)) % EWMA_TICK_S == 0:
                    rate = self.ewma_count / EWMA_TICK_S
                    self.ewma = rate if self.ewma is None else self.ewma + EWMA_ALPHA * (rate - self.ewma)
                    self.ewma_count = 0.0
            out[i] = self.ewma if self.ewma is not None else float(v)
        return out

    def _observe_recovery(self, seconds: np.ndarray, diffs: np.ndarray) -> None:
        m = self.monitor
        if m is None:
            return
        m["diffs"].extend(float(d) for d, s in zip(diffs, seconds, strict=False) if s > m["t"])
        end = recovery_end(m["diffs"], self.diffs.mean, self.diffs.std)
        if end is None:
            return
        observed = observed_recovery(m["diffs"][:end + 1], self.diffs.mean, self.diffs.std)
        observed = 0.0 if observed is None else max(observed, 0.0)
        step = 1 if observed > m["predicted"] else -1
        if m["out"]:
            self.downtime_out = max(self.min_downtime, self.downtime_out + step)
        else:
            self.downtime_in = max(self.min_downtime, self.downtime_in + step)
        r = self.records["recovery"]
        for key, value in (("t_s", m["t"]), ("controller", self.name), ("scaleout", m["scaleout"]),
                           ("predicted_s", float(m["predicted"])), ("observed_s", observed),
                           ("downtime_s", float(m["downtime"]))):
            r[key].append(value)
        self.monitor = None

    def _book_capacity(self, t: float) -> None:
        c = self.records["capacity"]
        for p in range(1, self.capacity.max_scaleout + 1):
            est = self.capacity.estimated.get(p, 0)
            obs = self.capacity.observed.get(p, 0)
            if est or obs:
                c["t_s"].append(t)
                c["controller"].append(self.name)
                c["scaleout"].append(p)
                c["estimated"].append(est)
                c["observed"].append(obs)

    def _book_forecast(self, t: float, kind: str, forecast: np.ndarray) -> None:
        f = self.records["forecasts"]
        f["t_s"].append(t)
        f["controller"].append(self.name)
        f["model"].append(kind)
        f["wape"].append(float(self.forecaster.error))
        f["horizon_max"].append(float(np.max(forecast)) if len(forecast) else 0.0)
        f["mode"].append(self.forecaster.mode.value)
