"""Daedalus' workload forecast (docs/papers/daedalus.md#workload-forecasting): a non-seasonal
auto-ARIMA (pmdarima) updated every loop, its accuracy as WAPE, a linear fallback when it is poor
and retraining after a run of poor loops.

Two modes, recorded in the manifest:

* ``exact``: the model keeps the whole history; every loop `update()`s it with the new samples; a
  retrain fits auto-ARIMA on the whole workload since the start (as coded).
* ``fast``: bounded history and fixed parameters. Auto-ARIMA picks the order and estimates the
  parameters (first training and retrains, on at most the last ``history_s`` samples); every loop
  applies that model to the last ``history_s`` samples (a Kalman filter pass, no re-estimation) and
  forecasts from there. Cost per loop is bounded instead of growing with the run.

In the simulator a retrain is trained when it is triggered and takes over at the next loop
(deterministic); nothing runs in the background.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np


class ForecastMode(str, Enum):
    exact = "exact"
    fast = "fast"


def wape(actual: Union[Sequence[float], np.ndarray], forecast: Union[Sequence[float], np.ndarray]) -> float:
    """Σ|a − f| / Σa over the overlap of both; ∞ without overlap or when Σa is 0."""
    n = min(len(actual), len(forecast))
    if n == 0:
        return math.inf
    a = np.asarray(actual[:n], dtype=float)
    f = np.asarray(forecast[:n], dtype=float)
    total = float(a.sum())
    if total <= 0:
        return math.inf
    return float(np.abs(a - f).sum() / total)


def linear_fallback(window: Union[Sequence[float], np.ndarray], horizon: int) -> np.ndarray:
    """Least-squares line of the window over time (0, 1, ...), extrapolated over the next `horizon`
    steps (len(window), len(window) + 1, ...)."""
    y = np.asarray(window, dtype=float)
    if horizon <= 0:
        return np.zeros(0)
    if len(y) == 0:
        return np.zeros(horizon)
    if len(y) == 1:
        return np.full(horizon, y[0])
    x = np.arange(len(y), dtype=float)
    xm, ym = x.mean(), y.mean()
    slope = float(((x - xm) * (y - ym)).sum() / ((x - xm) ** 2).sum())
    future = np.arange(len(y), len(y) + horizon, dtype=float)
    return ym + slope * (future - xm)


@dataclass
class RetrainCounter:
    """Consecutive poor loops. Paper/Decision: poor = WAPE ≥ 0.25, the count restarts when a retrain
    starts. Code (`repeat=True`, threshold 0.10): no restart, a new retrain in every loop while ≥ 15."""

    threshold: float = 0.25
    limit: int = 15
    repeat: bool = False
    count: int = 0
    retrains: int = 0

    def observe(self, error: float) -> bool:
        """Count one loop's WAPE; True when a retrain starts now."""
        self.count = self.count + 1 if error >= self.threshold else 0
        if self.count >= self.limit:
            self.retrains += 1
            if not self.repeat:
                self.count = 0
            return True
        return False


def choose(error: float, arima: Optional[np.ndarray], window: Union[Sequence[float], np.ndarray], fallback_horizon: int,
           threshold: float = 0.25) -> Tuple[np.ndarray, str]:
    """The forecast a loop uses: ARIMA's if its last WAPE is below the threshold, else the linear
    fallback over the latest window."""
    if arima is not None and error < threshold:
        return arima, "arima"
    return linear_fallback(window, fallback_horizon), "linear"


def _d(history: np.ndarray) -> int:
    from pmdarima.arima import ndiffs

    try:
        return max(ndiffs(history, alpha=0.05, test="kpss", max_d=6), ndiffs(history, alpha=0.05, test="adf", max_d=6))
    except (ValueError, np.linalg.LinAlgError):
        return 1


def auto_arima(history: Sequence[float]) -> Any:
    """The paper's auto-ARIMA: non-seasonal, d from KPSS and ADF, p, q ≤ 5, stepwise, seed 20."""
    import pmdarima as pm

    y = np.asarray(history, dtype=float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pm.auto_arima(y, d=_d(y), start_p=0, start_q=0, max_p=5, max_q=5, seasonal=False, stepwise=True,
                             random_state=20, n_fits=50, suppress_warnings=True, error_action="ignore")


def applied(model: Any, history: np.ndarray) -> Any:
    """The fitted model's parameters applied to `history`: its Kalman filter over it, which is all a
    forecast reads. statsmodels' own `apply` also runs the smoother backwards over the whole
    history when the fit was smoothed (as pmdarima's are), and both keep per step what no forecast
    reads (the Kalman gain, standardised errors), which the forecast's filter inherits and copies
    over its whole horizon. The forecasts are the same to the bit."""
    from statsmodels.tsa.statespace.kalman_filter import MEMORY_NO_GAIN, MEMORY_NO_SMOOTHING, MEMORY_NO_STD_FORECAST

    fitted = model.arima_res_
    unread = MEMORY_NO_GAIN | MEMORY_NO_SMOOTHING | MEMORY_NO_STD_FORECAST
    # statsmodels' results still derive the standardised errors in numpy, which warns where a
    # perfectly predicted step has no error variance (its filter did so silently)
    with np.errstate(divide="ignore", invalid="ignore"):
        return fitted.model.clone(history).filter(fitted.params, cov_type="none", conserve_memory=unread)


@dataclass
class Forecaster:
    """The forecasting state of one controller (its history, model, counters and last forecast)."""

    mode: ForecastMode = ForecastMode.fast
    horizon: int = 900
    fallback_horizon: int = 900
    use_threshold: float = 0.25
    history_s: int = 1800  # fast mode's bounded history
    update_overlap: bool = False
    counter: RetrainCounter = field(default_factory=RetrainCounter)
    history: List[float] = field(default_factory=list)
    model: Any = None  # a pmdarima ARIMA once trained
    pending: Any = None  # a retrained model that takes over at the next loop
    applied: Any = None  # fast mode: the model applied to the bounded history (statsmodels results)
    last_arima: Optional[np.ndarray] = None
    error: float = math.inf
    fits: int = 0
    failures: int = 0

    def loop(self, new: Union[Sequence[float], np.ndarray], window: Union[Sequence[float], np.ndarray]
             ) -> Tuple[np.ndarray, str]:
        """One loop with the samples seen since the last one (`new`, oldest first) and the loop's
        window (`window`, the last 61 s): WAPE of the previous ARIMA forecast, model update,
        retraining, and the forecast to use with its kind ("arima" or "linear")."""
        new = [float(v) for v in new]
        self.error = wape(new, self.last_arima) if self.last_arima is not None else math.inf
        if self.pending is not None:
            self.model, self.pending = self.pending, None
        self.history.extend(new)
        if self.mode is ForecastMode.fast and len(self.history) > 2 * self.history_s:
            del self.history[:-self.history_s]  # keep it bounded (the model sees the last history_s)
        self._advance(new, window)
        arima = self._predict()
        self.last_arima = arima
        if self.counter.observe(self.error):
            self.pending = self._train(self.history if self.mode is ForecastMode.exact
                                       else self.history[-self.history_s:])
        forecast, kind = choose(self.error, arima, window, self.fallback_horizon, self.use_threshold)
        return forecast, kind

    def _train(self, history: Sequence[float]) -> Any:
        if len(history) < 10:
            return None
        try:
            self.fits += 1
            return auto_arima(history)
        except (ValueError, np.linalg.LinAlgError):
            self.failures += 1
            return None

    def _advance(self, new: List[float], window: Union[Sequence[float], np.ndarray]) -> None:
        if self.model is None:
            self.model = self._train(self.history[-self.history_s:] if self.mode is ForecastMode.fast else self.history)
            return
        try:
            if self.mode is ForecastMode.exact:
                seen = [float(window[-len(new) - 1])] if self.update_overlap and len(window) > len(new) else []
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    self.model.update(np.asarray(seen + new, dtype=float))
            else:
                self.applied = applied(self.model, np.asarray(self.history[-self.history_s:], dtype=float))
        except (ValueError, np.linalg.LinAlgError):
            self.failures += 1
            self.applied = None

    def _predict(self) -> Optional[np.ndarray]:
        if self.model is None:
            return None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if self.mode is ForecastMode.fast and self.applied is not None:
                    f = np.asarray(self.applied.forecast(self.horizon), dtype=float)
                else:
                    f = np.asarray(self.model.predict(self.horizon), dtype=float)
        except (ValueError, np.linalg.LinAlgError):
            self.failures += 1
            return None
        return f if np.all(np.isfinite(f)) else None
