"""Time compression of the live job mode (`backend.live.job.time_compression`, f;
docs/papers/daedalus.md#live-runtime): the config's times are the paper's; a live run divides them
by f. Pure functions on the resolved config of one run and on the workload's rate series. A
policy's times are the fields its parameter dataclass declares as times (`time_field`).

Not compressed: latencies (measured in real time), rates (normalised to the live workers' capacity,
testbed/live/job.py) and the controllers' statistics per sample (ARIMA orders, regression windows),
which is why live results are trend checks only."""
from __future__ import annotations

import math
from typing import Any, Dict

import numpy as np

from testbed.policies.contract import time_fields


def scaled(value: Any, f: float) -> Any:
    """value / f; an int stays an int, rounded, and a positive one stays >= 1 (0 keeps its meaning)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return 0 if value == 0 else max(1, int(round(value / f)))
    return float(value) / f


def compress_config(run_cfg: Any, f: float) -> Dict[str, Dict[str, Any]]:
    """Divide the times of a run's resolved config by f, in place; returns what changed
    ({section: {key: [paper, live]}}) for the manifest."""
    changed: Dict[str, Dict[str, Any]] = {}
    if f == 1:
        return changed

    def set_(section: str, obj: Any, key: str, value: Any) -> None:
        old = getattr(obj, key)
        setattr(obj, key, value)
        changed.setdefault(section, {})[key] = [old, value]

    set_("run", run_cfg, "duration_min", float(run_cfg.duration_min) / f)
    set_("runtime", run_cfg.runtime, "monitoring_s", float(max(1, round(run_cfg.runtime.monitoring_s / f))))
    job = run_cfg.job
    set_("job", job, "checkpoint_s", job.checkpoint_s / f)
    set_("job", job, "downtime_out_s", [v / f for v in job.downtime_out_s])
    set_("job", job, "downtime_in_s", [v / f for v in job.downtime_in_s])
    # the window a controller sees: one loop and a second (61 s for a 60 s loop)
    set_("job", job, "window_s", max(2, int(math.ceil(job.window_s / f))))
    for name, params in run_cfg.policies.items():
        for key in time_fields(params):  # declared on the parameter dataclass (contract.time_field)
            set_(f"policies.{name}", params, key, scaled(getattr(params, key), f))
    return changed


def compress_rates(rates: np.ndarray, f: float) -> np.ndarray:
    """Per live second, the mean rate of the f pattern seconds it stands for (f need not be an
    integer: pattern second s counts with the part of [s, s+1) inside [t·f, (t+1)·f))."""
    rates = np.asarray(rates, dtype=float)
    if f == 1:
        return rates.copy()
    n = int(math.floor(len(rates) / f))
    cum = np.concatenate([[0.0], np.cumsum(rates)])

    def integral(x: np.ndarray) -> np.ndarray:  # of the step function rates over [0, x)
        i = np.minimum(np.floor(x).astype(int), len(rates))
        frac = x - i
        nxt = rates[np.minimum(i, len(rates) - 1)]
        return cum[i] + np.where(i < len(rates), frac * nxt, 0.0)

    edges = np.arange(n + 1, dtype=float) * f
    return np.diff(integral(edges)) / f
