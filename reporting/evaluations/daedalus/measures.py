"""The Daedalus evaluations' metrics, comparison with the paper, claims D1-D10 and figures
(docs/papers/daedalus.md#claims), from job-mode event logs (pandas; a run is 6 h at 1 s, so a few
hundred thousand rows at most).

Per run: `mean_workers` (time-average of the parallelism), `latency_ms` (mean over sampled items),
`latency_p95_ms`, `latency_p95_time_avg_ms` (the time-average of the per-second p95, the paper's
probable "average"), `latency_max_ms`, `rescales`, `capacity_error_pct` (the controller's C(p) at its
current scale-out against the true μ / max s_w), `forecast_wape_median`, `forecast_wape_below_5_pct`,
`fallback_loops`, `rt_predicted_s`/`rt_observed_s` (the controller's anomaly-detected recovery) and
`rt_true_s` (the simulator's: until the lag is back), `rt_predicted_ge_observed_pct`,
`excess_workers_falling`/`excess_workers_rising` (workers above the fewest that carry the load, while
the workload falls or rises) and `keeps_up` (1: the p95 latency is below the 600 s RT target and the
backlog at the end could be worked off within it, i.e. is below 600 s of the mean arrival rate; live,
the target divided by the run's time compression, as its controllers had it; a run
that ends during a rescale's recovery still keeps up, one whose backlog grows for hours does not).

Per configuration: the mean and sd over repetitions, and `workers_saved_pct` against every other
configuration of the workload: (other − this) / other × 100, from the mean workers.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Dict, Tuple

import numpy as np
import pandas as pd

from reporting.metrics import ran_configurations
from testbed.eventlog import EventLog, EventLogError, find_runs, read_manifest

PROJECT = Path(__file__).resolve().parents[3]
REFERENCE = PROJECT / "experiments" / "reference" / "paper_daedalus_results.csv"
RT_TARGET_S = 600.0
TABLES = ("instances", "latency", "load")  # what run_metrics reads always (the others where a run has them)

METRICS = ("mean_workers", "workers_per_12", "latency_ms", "latency_p95_ms", "latency_p95_time_avg_ms",
           "latency_max_ms",
           "rescales", "keeps_up", "capacity_error_pct", "forecast_wape_median", "forecast_wape_below_5_pct",
           "fallback_loops", "rt_predicted_s", "rt_observed_s", "rt_true_s", "rt_predicted_ge_observed_pct",
           "rt_predicted_ge_true_pct",
           "excess_workers_falling", "excess_workers_rising")


def is_job_run(run_dir: Path) -> bool:
    try:
        cfg = read_manifest(run_dir).resolved_config
    except EventLogError:
        return False
    return bool(cfg.get("job", {}).get("enabled"))


def parallelism(log: EventLog) -> pd.DataFrame:
    inst = log.read("instances")
    return pd.DataFrame({"t_s": inst.t_s, "n": inst.instances + inst.starting})


def _latency(lat: pd.DataFrame) -> Dict[str, float]:
    v = lat.latency_ms.to_numpy()
    per_s = lat.groupby(np.floor(lat.t_s)).latency_ms.quantile(0.95) if v.size else pd.Series(dtype=float)
    return {"latency_ms": float(v.mean()) if v.size else math.nan,
            "latency_p95_ms": float(np.quantile(v, 0.95)) if v.size else math.nan,
            "latency_p95_time_avg_ms": float(per_s.mean()) if len(per_s) else math.nan,
            "latency_max_ms": float(v.max()) if v.size else math.nan}


def _capacity_error(log: EventLog, par: pd.DataFrame, true_cap: Dict[int, float]) -> float:
    """Median error of the controller's capacity estimate at its current scale-out against the truth."""
    if not (log.has("capacity") and true_cap):
        return math.nan
    cap = log.read("capacity")
    n_at = np.interp(cap.t_s, par.t_s, par.n, left=par.n.iloc[0])
    cur = cap[cap.scaleout == np.rint(n_at).astype(int)]
    est = np.where(cur.observed > 0, cur.observed, cur.estimated).astype(float)
    truth = np.array([true_cap.get(int(p), math.nan) for p in cur.scaleout])
    err = np.abs(est - truth) / truth * 100.0
    return float(np.nanmedian(err)) if err.size else math.nan


def _forecasts(log: EventLog) -> Dict[str, float]:
    if not log.has("forecasts"):
        return {"forecast_wape_median": math.nan, "forecast_wape_below_5_pct": math.nan, "fallback_loops": math.nan}
    f = log.read("forecasts")
    w = f.wape[np.isfinite(f.wape)]
    return {"forecast_wape_median": float(w.median()) if len(w) else math.nan,
            "forecast_wape_below_5_pct": float((w < 0.05).mean() * 100) if len(w) else math.nan,
            "fallback_loops": float((f.model == "linear").sum())}


def _recovery(log: EventLog, res: pd.DataFrame) -> Dict[str, float]:
    """Predicted against anomaly-observed recovery times, and the simulator's true one (lag back)."""
    out = {"rt_predicted_s": math.nan, "rt_observed_s": math.nan, "rt_predicted_ge_observed_pct": math.nan}
    r = log.read("recovery") if log.has("recovery") else pd.DataFrame()
    if len(r):
        out = {"rt_predicted_s": float(r.predicted_s.mean()), "rt_observed_s": float(r.observed_s.mean()),
               "rt_predicted_ge_observed_pct": float((r.predicted_s >= r.observed_s).mean() * 100)}
    out["rt_true_s"] = float(res.recovered_s.mean()) if len(res) else math.nan
    out["rt_predicted_ge_true_pct"] = math.nan
    if log.has("recovery") and len(res):
        both = r.merge(res, on="t_s")
        if len(both):
            out["rt_predicted_ge_true_pct"] = float((both.predicted_s >= both.recovered_s.fillna(np.inf)).mean() * 100)
    return out


def _excess_workers(rate: np.ndarray, par: pd.DataFrame, true_cap: Dict[int, float]) -> Dict[str, float]:
    """Workers above the fewest that carry the load, while the workload falls / rises (10-min trend)."""
    if not true_cap:
        return {"excess_workers_falling": math.nan, "excess_workers_rising": math.nan}
    caps = np.array([true_cap[p] for p in sorted(true_cap)])
    smooth = pd.Series(rate).rolling(600, center=True, min_periods=1).mean().to_numpy()
    need = np.searchsorted(caps, smooth, side="right") + 1  # fewest workers whose capacity exceeds the load
    n_s = np.interp(np.arange(1, len(rate) + 1), par.t_s, par.n, left=par.n.iloc[0])
    slope = np.gradient(smooth)
    excess = n_s - need
    falling, rising = slope < -0.5, slope > 0.5
    return {"excess_workers_falling": float(excess[falling].mean()) if falling.any() else math.nan,
            "excess_workers_rising": float(excess[rising].mean()) if rising.any() else math.nan}


def run_metrics(run_dir: Path) -> Dict[str, float]:
    m = read_manifest(run_dir)
    log = EventLog(run_dir)
    job = m.details.get("job", {})
    true_cap = {int(k): float(v) for k, v in job.get("capacity", {}).items()}
    par = parallelism(log)
    out: Dict[str, float] = {"mean_workers": float(par.n.mean())}
    out["workers_per_12"] = out["mean_workers"] / 12.0
    out.update(_latency(log.read("latency")))
    res = log.read("rescales") if log.has("rescales") else pd.DataFrame()
    out["rescales"] = float(len(res))
    rate = log.read("load")["items"].to_numpy(dtype=float)
    final_lag = float(job.get("unprocessed_at_end", 0.0))
    # a live run's controllers worked to the paper's target divided by its time compression
    target_s = RT_TARGET_S / float(m.details.get("time_compression", 1.0))
    out["keeps_up"] = float(final_lag <= target_s * max(rate.mean(), 1.0) and out["latency_p95_ms"] <= target_s * 1000)
    out["capacity_error_pct"] = _capacity_error(log, par, true_cap)
    out.update(_forecasts(log))
    out.update(_recovery(log, res))
    out.update(_excess_workers(rate, par, true_cap))
    return out


def runs_table(root: Path) -> pd.DataFrame:
    """One row per complete job-mode run below root: pattern, config, rep and its metrics."""
    rows = []
    for d in find_runs(root):
        m = read_manifest(d)
        if m.status != "complete" or not is_job_run(d):
            continue
        rows.append({"pattern": m.pattern, "config": m.config, "backend": m.backend, "rep": m.rep, "run_dir": str(d),
                     **run_metrics(d)})
    return pd.DataFrame(rows)


def backends(table: pd.DataFrame) -> pd.Series:
    """The backend of each row of a runs or results table: its `backend` column (the runs' manifests);
    a table without one (written before it existed, or built by hand) is read as named: ""."""
    return table["backend"].astype(str) if "backend" in table.columns else pd.Series("", index=table.index)


def ran(res: pd.DataFrame) -> Dict[str, Tuple[str, str]]:
    """Run folders' name -> (the configuration it ran, the backend that ran it) of a results table."""
    return dict(zip(res.config, zip(ran_configurations(res), backends(res), strict=True), strict=True))


def results(runs: pd.DataFrame) -> pd.DataFrame:
    """Long format: pattern, config, backend, metric, mean, sd, n; plus workers_saved_pct vs each
    other config."""
    rows = []
    runs = runs.assign(backend=backends(runs))
    for (pattern, config, backend), g in runs.groupby(["pattern", "config", "backend"], sort=False):
        for metric in METRICS:
            vals = g[metric].dropna()
            rows.append({"pattern": pattern, "config": config, "backend": backend, "metric": metric, "against": "",
                         "mean": float(vals.mean()) if len(vals) else math.nan,
                         "sd": float(vals.std(ddof=1)) if len(vals) > 1 else math.nan, "n": int(len(vals))})
    means = runs.groupby(["pattern", "config"]).mean_workers.mean()
    backend_of = dict(zip(runs.config, runs.backend, strict=True))
    for pattern in runs.pattern.unique():
        configs = [c for (p, c) in means.index if p == pattern]
        for c in configs:
            for other in configs:
                if other != c:
                    mine, theirs = means[(pattern, c)], means[(pattern, other)]
                    rows.append({"pattern": pattern, "config": c, "backend": backend_of[c],
                                 "metric": "workers_saved_pct", "against": other,
                                 "mean": (theirs - mine) / theirs * 100.0, "sd": math.nan, "n": 1})
    return pd.DataFrame(rows)


def value(res: pd.DataFrame, pattern: str, config: str, metric: str, against: str = "") -> float:
    sel = res[(res.pattern == pattern) & (res.config == config) & (res.metric == metric) & (res.against == against)]
    return float(sel["mean"].iloc[0]) if len(sel) else math.nan


def load_reference(path: Path = REFERENCE) -> pd.DataFrame:
    return pd.read_csv(path)


def comparison(res: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """Published beside measured: per workload and approach, mean workers, mean latency and the
    savings of Daedalus against the approach (for the r50 HPAs the paper's values of the same target)."""
    rows, names = [], ran(res)
    for pattern in res.pattern.unique():
        configs = list(dict.fromkeys(res[res.pattern == pattern].config))
        for c in configs:
            base, backend = names[c]
            ref_c = base.replace("-r50", "")
            ref = reference[(reference.pattern == pattern) & (reference.approach == ref_c)]
            # Daedalus on the same backend
            ours = next((o for o in configs if names[o] == ("daedalus", backend)), "daedalus")

            def paper(metric: str, ref: pd.DataFrame = ref) -> float:
                sel = ref[ref.metric == metric]
                return float(sel.value.iloc[0]) if len(sel) else math.nan

            rows.append({"pattern": pattern, "approach": c,
                         "paper_workers": paper("mean_workers"),
                         "measured_workers": value(res, pattern, c, "mean_workers"),
                         "paper_latency_ms": paper("latency_ms"),
                         "measured_latency_ms": value(res, pattern, c, "latency_ms"),
                         "measured_latency_p95_ms": value(res, pattern, c, "latency_p95_ms"),
                         "paper_saved_pct": paper("workers_saved_pct"),
                         "measured_saved_pct": value(res, pattern, ours, "workers_saved_pct", c)
                         if c != ours else math.nan,
                         "keeps_up": value(res, pattern, c, "keeps_up"),
                         "rescales": value(res, pattern, c, "rescales")})
    return pd.DataFrame(rows)
