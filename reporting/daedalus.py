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
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import pandas as pd

from testbed.eventlog import EventLog, EventLogError, find_runs, read_manifest

PROJECT = Path(__file__).resolve().parent.parent
REFERENCE = PROJECT / "experiments" / "reference" / "paper_daedalus_results.csv"
RT_TARGET_S = 600.0

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


def _parallelism(log: EventLog) -> pd.DataFrame:
    inst = log.read("instances")
    return pd.DataFrame({"t_s": inst.t_s, "n": inst.instances + inst.starting})


def run_metrics(run_dir: Path) -> Dict[str, float]:
    m = read_manifest(run_dir)
    log = EventLog(run_dir)
    job = m.details.get("job", {})
    true_cap = {int(k): float(v) for k, v in job.get("capacity", {}).items()}
    par = _parallelism(log)
    lat = log.read("latency")
    load = log.read("load")
    out: Dict[str, float] = {}
    out["mean_workers"] = float(par.n.mean())
    out["workers_per_12"] = out["mean_workers"] / 12.0
    v = lat.latency_ms.to_numpy()
    out["latency_ms"] = float(v.mean()) if v.size else math.nan
    out["latency_p95_ms"] = float(np.quantile(v, 0.95)) if v.size else math.nan
    per_s = lat.groupby(np.floor(lat.t_s)).latency_ms.quantile(0.95) if v.size else pd.Series(dtype=float)
    out["latency_p95_time_avg_ms"] = float(per_s.mean()) if len(per_s) else math.nan
    out["latency_max_ms"] = float(v.max()) if v.size else math.nan
    res = log.read("rescales") if log.has("rescales") else pd.DataFrame()
    out["rescales"] = float(len(res))
    rate = load["items"].to_numpy(dtype=float)
    final_lag = float(job.get("unprocessed_at_end", 0.0))
    # a live run's controllers worked to the paper's target divided by its time compression
    target_s = RT_TARGET_S / float(m.details.get("time_compression", 1.0))
    out["keeps_up"] = float(final_lag <= target_s * max(rate.mean(), 1.0) and out["latency_p95_ms"] <= target_s * 1000)
    # capacity estimates at the current scale-out against the truth
    if log.has("capacity") and true_cap:
        cap = log.read("capacity")
        n_at = np.interp(cap.t_s, par.t_s, par.n, left=par.n.iloc[0])
        cur = cap[cap.scaleout == np.rint(n_at).astype(int)]
        est = np.where(cur.observed > 0, cur.observed, cur.estimated).astype(float)
        truth = np.array([true_cap.get(int(p), math.nan) for p in cur.scaleout])
        err = np.abs(est - truth) / truth * 100.0
        out["capacity_error_pct"] = float(np.nanmedian(err)) if err.size else math.nan
    else:
        out["capacity_error_pct"] = math.nan
    if log.has("forecasts"):
        f = log.read("forecasts")
        w = f.wape[np.isfinite(f.wape)]
        out["forecast_wape_median"] = float(w.median()) if len(w) else math.nan
        out["forecast_wape_below_5_pct"] = float((w < 0.05).mean() * 100) if len(w) else math.nan
        out["fallback_loops"] = float((f.model == "linear").sum())
    else:
        out["forecast_wape_median"] = out["forecast_wape_below_5_pct"] = out["fallback_loops"] = math.nan
    if log.has("recovery"):
        r = log.read("recovery")
        out["rt_predicted_s"] = float(r.predicted_s.mean()) if len(r) else math.nan
        out["rt_observed_s"] = float(r.observed_s.mean()) if len(r) else math.nan
        out["rt_predicted_ge_observed_pct"] = (float((r.predicted_s >= r.observed_s).mean() * 100) if len(r)
                                               else math.nan)
    else:
        out["rt_predicted_s"] = out["rt_observed_s"] = out["rt_predicted_ge_observed_pct"] = math.nan
    out["rt_true_s"] = float(res.recovered_s.mean()) if len(res) else math.nan
    out["rt_predicted_ge_true_pct"] = math.nan
    if log.has("recovery") and len(res):
        r = log.read("recovery")
        both = r.merge(res, on="t_s")
        if len(both):
            out["rt_predicted_ge_true_pct"] = float((both.predicted_s >= both.recovered_s.fillna(np.inf)).mean() * 100)
    # over-provisioning while the workload falls / rises (10-min trend of the arrival rate)
    if true_cap:
        caps = np.array([true_cap[p] for p in sorted(true_cap)])
        smooth = pd.Series(rate).rolling(600, center=True, min_periods=1).mean().to_numpy()
        need = np.searchsorted(caps, smooth, side="right") + 1  # fewest workers whose capacity exceeds the load
        n_s = np.interp(np.arange(1, len(rate) + 1), par.t_s, par.n, left=par.n.iloc[0])
        slope = np.gradient(smooth)
        excess = n_s - need
        falling, rising = slope < -0.5, slope > 0.5
        out["excess_workers_falling"] = float(excess[falling].mean()) if falling.any() else math.nan
        out["excess_workers_rising"] = float(excess[rising].mean()) if rising.any() else math.nan
    else:
        out["excess_workers_falling"] = out["excess_workers_rising"] = math.nan
    return out


def runs_table(root: Path) -> pd.DataFrame:
    """One row per complete job-mode run below root: pattern, config, rep and its metrics."""
    rows = []
    for d in find_runs(root):
        m = read_manifest(d)
        if m.status != "complete" or not is_job_run(d):
            continue
        rows.append({"pattern": m.pattern, "config": m.config, "rep": m.rep, "run_dir": str(d), **run_metrics(d)})
    return pd.DataFrame(rows)


def results(runs: pd.DataFrame) -> pd.DataFrame:
    """Long format: pattern, config, metric, mean, sd, n; plus workers_saved_pct vs each other config."""
    rows = []
    for (pattern, config), g in runs.groupby(["pattern", "config"], sort=False):
        for metric in METRICS:
            vals = g[metric].dropna()
            rows.append({"pattern": pattern, "config": config, "metric": metric, "against": "",
                         "mean": float(vals.mean()) if len(vals) else math.nan,
                         "sd": float(vals.std(ddof=1)) if len(vals) > 1 else math.nan, "n": int(len(vals))})
    means = runs.groupby(["pattern", "config"]).mean_workers.mean()
    for pattern in runs.pattern.unique():
        configs = [c for (p, c) in means.index if p == pattern]
        for c in configs:
            for other in configs:
                if other != c:
                    mine, theirs = means[(pattern, c)], means[(pattern, other)]
                    rows.append({"pattern": pattern, "config": c, "metric": "workers_saved_pct", "against": other,
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
    rows = []
    for pattern in res.pattern.unique():
        configs = list(dict.fromkeys(res[res.pattern == pattern].config))
        for c in configs:
            ref_c = c.replace("-r50", "")
            ref = reference[(reference.pattern == pattern) & (reference.approach == ref_c)]

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
                         "measured_saved_pct": value(res, pattern, "daedalus", "workers_saved_pct", c)
                         if c != "daedalus" else math.nan,
                         "keeps_up": value(res, pattern, c, "keeps_up"),
                         "rescales": value(res, pattern, c, "rescales")})
    return pd.DataFrame(rows)


# ---- claims ------------------------------------------------------------------------------------

def _hpas(res: pd.DataFrame, pattern: str, targets: Sequence[int]) -> List[str]:
    """The HPA configurations a claim is checked against: the paper's chart (request = half a worker,
    `-r50`) when measured, else the plain ones."""
    have = set(res[res.pattern == pattern].config)
    out = []
    for t in targets:
        out.append(f"hpa-{t}-r50" if f"hpa-{t}-r50" in have else f"hpa-{t}")
    return out


def _fmt(x: float, d: int = 1) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:,.{d}f}"


def _workers_claim(res: pd.DataFrame, pattern: str,
                   hpa_targets: Sequence[int]) -> Tuple[bool, List[str], Dict[str, float]]:
    w = {c: value(res, pattern, c, "mean_workers") for c in set(res[res.pattern == pattern].config)}
    lat = {c: value(res, pattern, c, "latency_ms") for c in w}
    up = {c: value(res, pattern, c, "keeps_up") for c in w}
    others = _hpas(res, pattern, hpa_targets) + ["static-12"]
    ok, ev = True, []
    for o in others:
        if o not in w or "daedalus" not in w:
            ok = False
            ev.append(f"{o}: not measured")
            continue
        saved = (w[o] - w["daedalus"]) / w[o] * 100
        ev.append(f"{o}: {_fmt(w[o])} workers, latency {_fmt(lat[o], 0)} ms, keeps up "
                  f"{int(up[o]) if not math.isnan(up[o]) else 'n/a'}; "
                  f"Daedalus saves {_fmt(saved)} %")
        ok &= saved > 0
    return ok, ev, lat


def check_claims(res: pd.DataFrame) -> pd.DataFrame:
    rows = []

    def add(claim: str, text: str, verdict: Optional[bool], evidence: str) -> None:
        rows.append({"claim": claim, "statement": text,
                     "verdict": "not measured" if verdict is None else ("holds" if verdict else "does not hold"),
                     "evidence": evidence})

    patterns = set(res.pattern)
    for claim, pattern, text in (("D1", "wc_sine",
                                  "Flink WC: Daedalus uses fewer workers than HPA 85, HPA 80 (23/31 %) and static (55 "
                                  "%); its latency lies between HPA 85's and HPA 80's and below static's"),
                                 ("D2", "ysb_avazu",
                                  "Flink YSB: 43-54 % fewer workers; Daedalus' mean latency is the highest of the "
                                  "four, all within about 1.5 s"),
                                 ("D3", "tm_two_spike",
                                  "Flink TM: 38-71 % fewer workers; every autoscaler beats static on mean latency")):
        if pattern not in patterns:
            add(claim, text, None, f"no runs of {pattern}")
            continue
        ok, ev, lat = _workers_claim(res, pattern, (85, 80))
        d = lat.get("daedalus", math.nan)
        h85, h80 = _hpas(res, pattern, (85, 80))
        extra = ""
        if claim == "D1":
            between = min(lat.get(h85, math.nan),
                          lat.get(h80, math.nan)) <= d <= max(lat.get(h85, math.nan), lat.get(h80, math.nan))
            below = d < lat.get("static-12", math.nan)
            ok &= between and below
            extra = f"; Daedalus latency {_fmt(d, 0)} ms: between the HPAs {between}, below static {below}"
        elif claim == "D2":
            vals = [lat.get(c, math.nan) for c in ("daedalus", h80, h85, "static-12")]
            highest = d >= max(vals)
            spread = max(vals) - min(vals)
            ok &= highest and spread <= 1500
            extra = f"; Daedalus latency {_fmt(d, 0)} ms highest {highest}; spread {_fmt(spread, 0)} ms"
        else:
            beats = all(lat.get(c, math.nan) < lat.get("static-12", math.nan) for c in ("daedalus", h80, h85))
            ok &= beats
            extra = f"; every autoscaler below static's {_fmt(lat.get('static-12', math.nan), 0)} ms: {beats}"
        add(claim, text, ok, "; ".join(ev) + extra)
    text = ("Kafka Streams WC: 57 % fewer workers than static, 11 % fewer than HPA 60; HPA 80 uses fewer workers but "
            "cannot keep up; static has the best latency")
    if "ks_sine" in patterns:
        w = {c: value(res, "ks_sine", c, "mean_workers") for c in ("daedalus", "hpa-60", "hpa-80", "static-12")}
        lat = {c: value(res, "ks_sine", c, "latency_ms") for c in w}
        up80 = value(res, "ks_sine", "hpa-80", "keeps_up")
        ok = (w["daedalus"] < w["static-12"] and w["daedalus"] < w["hpa-60"] and w["hpa-80"] < w["daedalus"]
              and up80 < 1 and lat["static-12"] <= min(lat.values()))
        add("D4", text, ok,
            "; ".join(f"{c}: {_fmt(w[c])} workers, {_fmt(lat[c], 0)} ms" for c in w) + f"; HPA 80 keeps up: {up80}")
    else:
        add("D4", text, None, "no runs of ks_sine (evaluation daedalus_ks)")
    add("D5", "Against Phoebe: 19 % fewer workers at about 2.9x the mean latency", None,
        "Phoebe is out of scope (docs/papers/daedalus.md#simulator)")
    dd = res[res.config == "daedalus"]
    cap = dd[dd.metric == "capacity_error_pct"]["mean"].dropna()
    add("D6", "Capacity estimates within 5 % of the observed maxima, mostly 0-3 %",
        bool(len(cap)) and bool((cap <= 5).all()),
        # cap has no NaN means, so it may be shorter than the patterns: the listing stops at its end
        "median error of C(p_cur) against the true μ / max s_w per workload: " + ", ".join(
            f"{p} {_fmt(v)} %" for p, v in zip(dd[dd.metric == "capacity_error_pct"].pattern, cap, strict=False)))
    wape = dd[dd.metric == "forecast_wape_below_5_pct"]
    fb = dd[dd.metric == "fallback_loops"]
    add("D7", "Forecast errors mostly below 5 %; WAPE never reaches 25 %, so the fallback is unused",
        bool(len(wape)) and bool((wape["mean"] > 50).all()) and bool((fb["mean"] <= 1).all()),
        "loops with WAPE < 5 %: "
        + ", ".join(f"{p} {_fmt(v)} %" for p, v in zip(wape.pattern, wape["mean"], strict=True))
        + "; fallback loops per run (the first loop has no previous forecast and always falls back): "
        + ", ".join(f"{p} {_fmt(v)}" for p, v in zip(fb.pattern, fb["mean"], strict=True)))
    ge = dd[dd.metric == "rt_predicted_ge_observed_pct"]
    add("D8", "Predicted RT >= measured RT almost always", bool(len(ge)) and bool((ge["mean"] >= 90).all()),
        "rescales with predicted >= anomaly-observed RT: "
        + ", ".join(f"{p} {_fmt(v)} %" for p, v in zip(ge.pattern, ge["mean"], strict=True))
        + "; with predicted >= true RT (until the lag is back): " + ", ".join(
            f"{p} {_fmt(value(res, p, 'daedalus', 'rt_predicted_ge_true_pct'))} %" for p in ge.pattern)
        + "; mean predicted / observed / true (lag back) RT: " + ", ".join(
            f"{p} {_fmt(value(res, p, 'daedalus', 'rt_predicted_s'), 0)} / "
            f"{_fmt(value(res, p, 'daedalus', 'rt_observed_s'), 0)}"
            f" / {_fmt(value(res, p, 'daedalus', 'rt_true_s'), 0)} s" for p in ge.pattern))
    ev, ok = [], bool(patterns & {"wc_sine", "ysb_avazu", "tm_two_spike"})
    for p in sorted(patterns & {"wc_sine", "ysb_avazu", "tm_two_spike"}):
        for h in _hpas(res, p, (80, 85)):
            fd, fh = value(res, p, "daedalus", "excess_workers_falling"), value(res, p, h, "excess_workers_falling")
            rd, rh = value(res, p, "daedalus", "excess_workers_rising"), value(res, p, h, "excess_workers_rising")
            ok &= fd < fh
            ev.append(f"{p} vs {h}: excess workers falling {_fmt(fd, 2)} vs {_fmt(fh, 2)}, rising {_fmt(rd, 2)} vs "
                      f"{_fmt(rh, 2)}")
    add("D9", "Daedalus scales in faster than HPA on falling workloads and out at about the same time",
        ok if ev else None, "; ".join(ev))
    flink = [p for p in ("wc_sine", "ysb_avazu", "tm_two_spike") if p in patterns]
    if flink and "ks_sine" in patterns:
        over = all(value(res, p, _hpas(res, p, (80,))[0], "mean_workers") > value(res, p, "daedalus", "mean_workers")
                   for p in flink)
        under = value(res, "ks_sine", "hpa-80", "keeps_up") < 1
        add("D10",
            "A fixed HPA threshold does not generalise: "
            "HPA 80 over-provisions on Flink and under-provisions on Kafka Streams",
            over and under,
            f"HPA 80 above Daedalus' workers on every Flink workload: {over}; "
            f"HPA 80 fails to keep up on Kafka Streams: {under}")
    else:
        add("D10", "A fixed HPA threshold does not generalise", None,
            "needs the Flink workloads and ks_sine (evaluation daedalus_ks)")
    return pd.DataFrame(rows)


# ---- figures -----------------------------------------------------------------------------------

def figures(runs: pd.DataFrame, out: Path) -> List[Path]:
    """Per workload: workers and latency over time (repetition 1 of each configuration, with the
    workload), and the latency ECDF over all repetitions (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for pattern, g in runs.groupby("pattern"):
        fig, (a1, a2) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
        for _, r in g[g.rep == g.rep.min()].iterrows():
            log = EventLog(Path(r.run_dir))
            par = _parallelism(log)
            a1.step(par.t_s / 3600, par.n, where="post", label=r.config, linewidth=1)
            lat = log.read("latency")
            per_min = lat.groupby(np.floor(lat.t_s / 60)).latency_ms.mean()
            a2.plot(per_min.index / 60, per_min.values / 1000, label=r.config, linewidth=1)
        load = EventLog(Path(g.run_dir.iloc[0])).read("load")
        ax = a1.twinx()
        ax.plot(load.t_s / 3600, load["items"].rolling(60, min_periods=1).mean(), color="grey", alpha=0.4, linewidth=1)
        ax.set_ylabel("workload [items/s]")
        a1.set_ylabel("workers")
        a1.legend(fontsize=7, ncol=3, loc="upper right")
        a2.set_yscale("log")
        a2.set_ylabel("latency per minute [s]")
        a2.set_xlabel("time [h]")
        a1.set_title(f"{pattern}: workers and latency over time (repetition 1)")
        fig.tight_layout()
        p = out / f"daedalus_{pattern}_timeline.png"
        fig.savefig(p, dpi=90, metadata={"Software": None})
        plt.close(fig)
        paths.append(p)
        fig, ax = plt.subplots(figsize=(6, 4))
        for config, gc in g.groupby("config", sort=False):
            v = np.sort(np.concatenate([EventLog(Path(d)).read("latency").latency_ms.to_numpy() for d in gc.run_dir]))
            ax.plot(v, np.arange(1, len(v) + 1) / len(v), label=config, linewidth=1)
        ax.set_xscale("log")
        ax.set_xlabel("latency [ms]")
        ax.set_ylabel("ECDF")
        ax.set_title(f"{pattern}: latency ECDF (all repetitions)")
        ax.legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        p = out / f"daedalus_{pattern}_latency_ecdf.png"
        fig.savefig(p, dpi=90, metadata={"Software": None})
        plt.close(fig)
        paths.append(p)
    return paths


# ---- text ----------------------------------------------------------------------------------------

def format_results(res: pd.DataFrame) -> str:
    """The main table: per workload and configuration, mean (sd) of the headline metrics."""
    lines = []
    heads = ("mean_workers", "latency_ms", "latency_p95_ms", "rescales", "keeps_up")
    for pattern in res.pattern.unique():
        lines.append(f"{pattern}")
        lines.append(f"  {'config':12s} " + " ".join(f"{h:>22s}" for h in heads))
        for c in dict.fromkeys(res[res.pattern == pattern].config):
            cells = []
            for h in heads:
                sel = res[(res.pattern == pattern) & (res.config == c) & (res.metric == h) & (res.against == "")]
                m, s = (float(sel["mean"].iloc[0]), float(sel["sd"].iloc[0])) if len(sel) else (math.nan, math.nan)
                cells.append(f"{_fmt(m, 1)} ({_fmt(s, 1)})".rjust(22))
            lines.append(f"  {c:12s} " + " ".join(cells))
    return "\n".join(lines)


def markdown(comp: pd.DataFrame, claims: pd.DataFrame, res: pd.DataFrame, figs: Sequence[Path]) -> str:
    out = ["# Daedalus evaluation: measured beside published", ""]
    for pattern, g in comp.groupby("pattern", sort=False):
        out += [f"## {pattern}", "",
                "| approach | workers (paper) | workers (measured) | latency ms (paper) | latency ms (measured mean) | "
                "p95 ms | Daedalus saves % (paper) | Daedalus saves % (measured) | keeps up | rescales |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        for _, r in g.iterrows():
            out.append(f"| {r.approach} | {_fmt(r.paper_workers)} | {_fmt(r.measured_workers, 2)} | "
                       f"{_fmt(r.paper_latency_ms, 0)} | "
                       f"{_fmt(r.measured_latency_ms, 0)} | {_fmt(r.measured_latency_p95_ms, 0)} | "
                       f"{_fmt(r.paper_saved_pct, 0)} | "
                       f"{_fmt(r.measured_saved_pct, 1)} | {_fmt(r.keeps_up, 1)} | {_fmt(r.rescales, 1)} |")
        out.append("")
    dd = res[(res.config == "daedalus") & (res.against == "")]
    if len(dd):
        out += ["## Daedalus internals", "",
                "| workload | capacity error % | WAPE median | loops WAPE < 5 % | fallback loops | "
                "RT predicted s | RT observed s | RT true s | predicted >= observed % |",
                "|---|---|---|---|---|---|---|---|---|"]
        for p in dd.pattern.unique():
            v = lambda m, p=p: value(res, p, "daedalus", m)  # noqa: E731
            out.append(f"| {p} | {_fmt(v('capacity_error_pct'), 2)} | {_fmt(v('forecast_wape_median'), 4)} | "
                       f"{_fmt(v('forecast_wape_below_5_pct'), 1)} | {_fmt(v('fallback_loops'), 1)} | "
                       f"{_fmt(v('rt_predicted_s'), 0)} | "
                       f"{_fmt(v('rt_observed_s'), 0)} | {_fmt(v('rt_true_s'), 0)} | "
                       f"{_fmt(v('rt_predicted_ge_observed_pct'), 1)} |")
        out.append("")
    out += ["## Claims", "", "| claim | verdict | statement | evidence |", "|---|---|---|---|"]
    for _, c in claims.iterrows():
        out.append(f"| {c.claim} | {c.verdict} | {c.statement} | {c.evidence} |")
    out += ["", "## Figures", ""] + [f"![{p.stem}]({p.name})" for p in figs]
    return "\n".join(out) + "\n"


def report(root: Path, out: Optional[Path] = None) -> Dict[str, Path]:
    """results.csv, comparison.csv, claims.csv, figures and report.md for the job-mode runs below root
    (a workload folder or a runs folder with several workloads)."""
    root = Path(root)
    out = Path(out) if out else root / "report"
    out.mkdir(parents=True, exist_ok=True)
    runs = runs_table(root)
    if runs.empty:
        raise ValueError(f"{root}: no complete job-mode runs")
    res = results(runs)
    comp = comparison(res, load_reference())
    claims = check_claims(res)
    figs = figures(runs, out)
    paths = {"results": out / "results.csv", "comparison": out / "comparison.csv", "claims": out / "claims.csv",
             "runs": out / "runs.csv", "markdown": out / "report.md"}
    res.to_csv(paths["results"], index=False)
    comp.to_csv(paths["comparison"], index=False)
    claims.to_csv(paths["claims"], index=False)
    runs.to_csv(paths["runs"], index=False)
    paths["markdown"].write_text(markdown(comp, claims, res, figs), encoding="utf-8")
    return paths
