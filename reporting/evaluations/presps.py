"""The PRESPS paper's report contribution (Wladdimiro et al., Compas 2023; docs/papers/presps.md):
its metrics, its Table 3 beside the measured one, claims P1-P4, the Fig. 3 analogues (replicas and
throughput over time) and the workload beside the reference trace's statistics.

Metrics per run (pandas, from the event log; the metric functions are pure and unit-tested):
* ``saved_resources`` = 1 - mean active replicas / r_over. Active replicas over time come from the
  `actions` table (scale-ups and activations +1, scale-downs and deactivations -1; the initial
  deployment included), time-weighted over the run, so a replica counts while it is allocated,
  also during a restart's downtime. r_over = n_ops x max_i ceil(peak x theta_i x et_i) (spec: the
  uniform over-provisioning that carries the peak; 32 for the calibrated chain); also
  ``saved_resources_sum`` with r_over = sum_i ceil(peak x theta_i x et_i) (20 for the chain).
* ``throughput_degradation`` = mean over 5 s windows w with in_w > 0 of |in_w - out_w| / in_w, where
  in_w = items the sources emitted in w (the `load` table) and out_w = items the sink operators
  completed in w (the `processed` table, divided by the items one input item makes at the sinks,
  1 for the chain); variants ``_1s`` and ``_30s`` (NaN when the monitoring interval is longer than the
  window) and ``_total`` (on the run's totals, which is what the per-window mean is not).
* ``processed_ratio`` = sink completions (same normalisation) / items emitted.
* ``latency_ms``: mean end-to-end latency of the sampled items completed by the sinks.
* ``mean_active_replicas``, ``r_over``, ``restarts``, ``dropped_timeout``, ``dropped_purge``.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import pandas as pd

from reporting.claims import claim_checker
from reporting.evaluations import EvaluationReport, SectionInputs, register_report

REFERENCE = Path(__file__).resolve().parents[2] / "experiments" / "reference" / "paper_presps_results.csv"
DELTAS = {"scale_up": 1, "scale_down": -1, "activate": 1, "deactivate": -1}
METRICS: Tuple[str, ...] = (
    "saved_resources", "throughput_degradation", "processed_ratio", "latency_ms",
    "throughput_degradation_1s", "throughput_degradation_30s", "throughput_degradation_total",
    "saved_resources_sum", "mean_active_replicas", "r_over", "restarts", "dropped_timeout", "dropped_purge",
)
TABLE3 = (("saved resources", "saved_resources", 4), ("throughput degradation", "throughput_degradation", 4),
          ("diff. proc. events", "processed_ratio", 4), ("latency (ms)", "latency_ms", 2))


# ---- metric functions (pure) ----------------------------------------------------------------------

def static_theta(topology: Mapping[str, Any]) -> Dict[str, float]:
    """theta_i from the topology config (resolved_config['topology']): the share of the input
    items reaching O_i, with a source's items going to each of its downstream operators and an
    operator sending ratio_out / ratio_in / len(downstream) items to each downstream operator."""
    sources = topology["sources"]
    ops = topology["operators"]
    total = float(sum(s["items_per_tick"] for s in sources.values())) or 1.0
    theta: Dict[str, float] = {o: 0.0 for o in ops}
    for s in sources.values():
        for d in s["downstream"]:
            theta[d] += s["items_per_tick"] / total
    indegree = {o: 0 for o in ops}
    for op in ops.values():
        for d in op["downstream"]:
            indegree[d] += 1
    ready = sorted(o for o, k in indegree.items() if k == 0)
    while ready:
        o = ready.pop(0)
        op = ops[o]
        down = op["downstream"]
        share = (op.get("ratio_out", 1) / op.get("ratio_in", 1) / len(down)) if down else 0.0
        for d in down:
            theta[d] += theta[o] * share
            indegree[d] -= 1
            if indegree[d] == 0:
                ready.append(d)
                ready.sort()
    return theta


def over_provisioning(peak_rate: float, theta: Mapping[str, float], et_s: Mapping[str, float]) -> Tuple[int, int]:
    """(n_ops x max_i ceil(peak x theta_i x et_i), sum_i ceil(peak x theta_i x et_i)); at least 1 per operator."""
    need = {o: max(1, math.ceil(peak_rate * theta[o] * et_s[o] - 1e-6)) for o in theta}
    return len(need) * max(need.values()), sum(need.values())


def mean_active(actions: pd.DataFrame, duration_s: float) -> float:
    """Time-weighted mean over [0, duration] of the replicas allocated (all operators), from the
    actions' +1/-1 (DELTAS)."""
    if duration_s <= 0:
        return math.nan
    rows = actions[actions["action"].isin(list(DELTAS))]
    t = rows["t_s"].to_numpy(dtype=float)
    d = rows["action"].map(DELTAS).to_numpy(dtype=float)
    order = np.argsort(t, kind="stable")
    t, d = np.clip(t[order], 0.0, duration_s), d[order]
    level = np.cumsum(d)
    ends = np.append(t[1:], duration_s)
    return float(np.sum(level * (ends - t)) / duration_s)


def windows(times: np.ndarray, values: np.ndarray, window_s: float, duration_s: float, end_stamped: bool) -> np.ndarray:
    """Sums per window [k·w, (k+1)·w) of values stamped at `times` (end_stamped: a stamp is the end
    of the interval it counts, so it falls in the window ending at or after it)."""
    n = int(math.ceil(duration_s / window_s - 1e-9))
    t = np.asarray(times, dtype=float)
    idx = np.ceil(t / window_s - 1e-9).astype(int) - 1 if end_stamped else np.floor(t / window_s + 1e-9).astype(int)
    idx = np.clip(idx, 0, n - 1)
    return np.bincount(idx, weights=np.asarray(values, dtype=float), minlength=n)


def throughput_degradation(in_w: np.ndarray, out_w: np.ndarray) -> float:
    """Mean over windows with in_w > 0 of |in_w - out_w| / in_w."""
    mask = in_w > 0
    if not mask.any():
        return math.nan
    return float(np.mean(np.abs(in_w[mask] - out_w[mask]) / in_w[mask]))


def presps_metrics(tables: Mapping[str, pd.DataFrame], cfg: Mapping[str, Any], duration_s: float) -> Dict[str, float]:
    """The PRESPS metrics of one run from its tables (load, processed, latency, dropped, actions) and
    its resolved config."""
    topo = cfg["topology"]
    theta = static_theta(topo)
    sinks = [o for o, op in topo["operators"].items() if not op["downstream"]]
    per_input = sum(theta[o] for o in sinks) or 1.0
    load, processed = tables["load"], tables["processed"]
    tick_s = float(topo["tick_ms"]) / 1000.0
    per_tick = load.groupby("t_s")["items"].sum()
    peak = float(per_tick.max()) / tick_s if len(per_tick) else 0.0
    et = {o: float(op["service"]["mean_ms"]) / 1000.0 for o, op in topo["operators"].items()}
    r_over, r_sum = over_provisioning(peak, theta, et)
    active = mean_active(tables["actions"], duration_s)
    out_rows = processed[processed["operator"].isin(sinks)]
    monitoring_s = float(cfg["runtime"]["monitoring_s"])
    emitted = float(load["items"].sum())
    completed = float(out_rows["items"].sum()) / per_input
    m: Dict[str, float] = {"saved_resources": 1.0 - active / r_over, "saved_resources_sum": 1.0 - active / r_sum,
                           "mean_active_replicas": active, "r_over": float(r_over)}
    for name, w in (("throughput_degradation", 5.0), ("throughput_degradation_1s", 1.0),
                    ("throughput_degradation_30s", 30.0)):
        if w + 1e-9 < monitoring_s:
            m[name] = math.nan
            continue
        in_w = windows(load["t_s"].to_numpy(), load["items"].to_numpy(), w, duration_s, end_stamped=False)
        out_w = windows(out_rows["t_s"].to_numpy(), out_rows["items"].to_numpy(), w, duration_s, end_stamped=True)
        m[name] = throughput_degradation(in_w, out_w / per_input)
    m["throughput_degradation_total"] = abs(emitted - completed) / emitted if emitted else math.nan
    m["processed_ratio"] = completed / emitted if emitted else math.nan
    lat = tables["latency"]
    m["latency_ms"] = float(lat["latency_ms"].mean()) if len(lat) else math.nan
    m["restarts"] = float((tables["actions"]["action"] == "restart").sum())
    dropped = tables["dropped"]
    for reason in ("timeout", "purge"):
        m[f"dropped_{reason}"] = float(dropped.loc[dropped["reason"] == reason, "items"].sum())
    return {k: m[k] for k in METRICS}


TABLES = ("load", "processed", "latency", "dropped", "actions")  # what run_metrics reads


def _read_tables(run_dir: Path) -> Dict[str, pd.DataFrame]:
    from testbed.eventlog import EventLog

    log = EventLog(run_dir)
    return {t: log.read(t) for t in TABLES}


def run_metrics(run_dir: Path, manifest: Any) -> Dict[str, float]:
    cfg = manifest.resolved_config
    duration = manifest.sim_duration_s or float(cfg["duration_min"]) * 60.0
    return presps_metrics(_read_tables(Path(run_dir)), cfg, float(duration))


# ---- paper vs measured, claims ------------------------------------------------------------------

def load_reference(path: Path = REFERENCE) -> pd.DataFrame:
    from reporting.paper_comparison import load_reference as load

    return load(path)


def _values(table: pd.DataFrame, pattern: str) -> Dict[Tuple[str, str], float]:
    """(system, metric) -> mean of one pattern's rows (system: the configuration each row ran,
    whatever backend ran it, or the approach in the paper's table)."""
    from reporting.metrics import ran_configurations

    rows = table[table["pattern"] == pattern]
    if rows.empty:
        return {}
    configs = ran_configurations(rows)
    return {(c, m): float(v) for c, m, v in zip(configs, rows["metric"], rows["mean"], strict=True) if not pd.isna(v)}


def baselines(values: Mapping[Tuple[str, str], Any]) -> List[str]:
    """The DABS-like systems measured (`dabs`, and variants named dabs-<something>), `dabs` first."""
    return sorted({c for c, _ in values if c == "dabs" or c.startswith("dabs-")}, key=lambda c: (c != "dabs", c))


# P1-P4 as presps.yaml declares them, for every DABS-like baseline measured (the paper's side is always
# its DABS-Storm row); presps_live and presps_oee check the same claims
check_claims = claim_checker("presps")


# ---- sections -----------------------------------------------------------------------------------

def table3(summary: pd.DataFrame, reference: pd.DataFrame, pattern: str):
    """The paper's Table 3 beside the measured one (one row per system and source)."""
    from reporting.metrics import ran_configurations
    from reporting.report_document import Table, mean_sd

    paper, rows = _values(reference, pattern), []
    measured = summary[summary["pattern"] == pattern]
    stats = {(c, m): (mean, sd) for c, m, mean, sd in zip(ran_configurations(measured), measured["metric"],
                                                          measured["mean"], measured["sd"], strict=True)}
    for system in ("presps", "dabs"):
        rows.append([system, "paper"] + [f"{paper[(system, m)]:.{d}f}" if (system, m) in paper else "–"
                                         for _, m, d in TABLE3])
        measured_as = ["presps"] if system == "presps" else (baselines(stats) or ["dabs"])
        for name in measured_as:  # the DABS-like variants measured, each beside the paper's DABS-Storm
            rows.append([name, "measured"] + [mean_sd(*stats.get((name, m), (None, None)), d) for _, m, d in TABLE3])
    return Table(f"Table 3 of the paper beside the measured one ({pattern}; measured: mean ± sd over repetitions)",
                 ["system", "source"] + [h for h, _, _ in TABLE3], rows)


def _series(run) -> Dict[str, pd.Series]:
    from testbed.eventlog import EventLog

    log = EventLog(run.run_dir)
    actions, load, processed = log.read("actions"), log.read("load"), log.read("processed")
    cfg = run.manifest.resolved_config
    sinks = [o for o, op in cfg["topology"]["operators"].items() if not op["downstream"]]
    theta = static_theta(cfg["topology"])
    per_input = sum(theta[o] for o in sinks) or 1.0
    duration = float(run.manifest.sim_duration_s or cfg["duration_min"] * 60.0)
    rows = actions[actions["action"].isin(list(DELTAS))].sort_values("t_s", kind="stable")
    level = rows["action"].map(DELTAS).cumsum()
    replicas = pd.Series(level.to_numpy(), index=rows["t_s"].to_numpy()).groupby(level=0).last()
    if len(replicas):
        replicas.loc[max(duration, float(replicas.index.max()))] = replicas.iloc[-1]  # held to the run's end
    w = 5.0
    in_w = windows(load["t_s"].to_numpy(), load["items"].to_numpy(), w, duration, False) / w
    out_rows = processed[processed["operator"].isin(sinks)]
    out_w = windows(out_rows["t_s"].to_numpy(), out_rows["items"].to_numpy(), w, duration, True) / w / per_input
    t = np.arange(len(in_w)) * w
    return {"replicas": replicas, "input": pd.Series(in_w, index=t), "output": pd.Series(out_w, index=t)}


def _figure(inputs: SectionInputs, pattern: str, runs: Sequence[Any]) -> Optional[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first: Dict[str, Any] = {}
    for run in sorted(runs, key=lambda r: (r.config, r.rep)):
        first.setdefault(run.config, run)  # repetition 1 of each configuration
    if not first:
        return None
    fig, axes = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
    # the input as the workload has it: from a run without restarts (a DABS-like run holding or
    # pausing its sources emits the downtimes' input later)
    input_from = _unrestarted(first.values())
    for config, run in sorted(first.items()):
        s = _series(run)
        axes[0].step(s["replicas"].index, s["replicas"].to_numpy(), where="post", label=config)
        if run is input_from:
            axes[1].plot(s["input"].index, s["input"].to_numpy(), color="black", linewidth=1.0, label="input")
        axes[1].plot(s["output"].index, s["output"].to_numpy(), linewidth=1.0, label=f"{config} output")
    axes[0].set_ylabel("active replicas (all operators)")
    axes[1].set_ylabel("events/s (5 s windows)")
    axes[1].set_xlabel("time [s]")
    axes[0].legend(loc="upper left", fontsize=8)
    axes[1].legend(loc="upper left", fontsize=8)
    axes[0].set_title(f"{pattern}: replicas (Fig. 3a) and throughput (Fig. 3b) over time, repetition 1")
    fig.tight_layout()
    folder = inputs.out / "figures"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"presps_fig3_{pattern}.png"
    fig.savefig(path, dpi=inputs.dpi, metadata={"Software": None})
    plt.close(fig)
    return path


def _unrestarted(runs: Iterable[Any]) -> Any:
    """A run whose load table is the workload as generated: one of a policy that never restarts if
    there is one (a DABS-like run holding or pausing its sources emits the downtimes' input later,
    and with `pause` not the trace's tail)."""
    return min(runs, key=lambda r: (r.manifest.policy == "dabs", r.config, r.rep))


def _workload_table(runs: Sequence[Any]):
    from reporting.report_document import Table
    from testbed.eventlog import EventLog
    from testbed.workloads.presps import REFERENCE_STATS, minute_rms_vs_reference, series_statistics

    run = _unrestarted(runs)

    load = EventLog(run.run_dir).read("load")
    tick_s = float(run.manifest.resolved_config["topology"]["tick_ms"]) / 1000.0
    rates = load.groupby("t_s")["items"].sum().to_numpy() / tick_s
    st = series_statistics(rates)
    keys = ("length_s", "min", "max", "mean", "sd", "diff_sd", "diff_max")
    rows = [["reference trace (paper.csv)"] + [f"{REFERENCE_STATS[k]:g}" for k in keys] + ["–"],
            [f"generated ({run.pattern})"] + [f"{st[k]:.1f}" if k != "length_s" else str(st[k]) for k in keys]
            + [f"{100 * minute_rms_vs_reference(rates):.1f} %"]]
    return Table("The workload beside the reference trace's statistics (events/s; diff = 1 s changes)",
                 ["series", "length s", "min", "max", "mean", "sd", "sd of diff", "max |diff|",
                  "per-minute RMS vs ref."],
                 rows)


_EXTRA = (("TD 1 s", "throughput_degradation_1s", 4), ("TD 5 s", "throughput_degradation", 4),
          ("TD 30 s", "throughput_degradation_30s", 4), ("TD totals", "throughput_degradation_total", 4),
          ("mean active", "mean_active_replicas", 2), ("r_over", "r_over", 0),
          ("saved (r_over = sum)", "saved_resources_sum", 4), ("restarts", "restarts", 1),
          ("timed out", "dropped_timeout", 0), ("purged", "dropped_purge", 0))


def metrics_table(summary: pd.DataFrame, columns: Sequence[Tuple[str, str, int]], caption: str):
    """One row per configuration (the PRESPS metrics do not depend on a BTU length)."""
    from reporting.report_document import Table, mean_sd

    independent = summary[summary["btu_minutes"].isna()]
    stats = {(c, m): (mean, sd, n) for c, m, mean, sd, n in zip(independent["config"], independent["metric"],
                                                                 independent["mean"], independent["sd"],
                                                                 independent["n"], strict=True)}
    rows = []
    for config in dict.fromkeys(independent["config"]):
        n = stats.get((config, columns[0][1]), (None, None, 0))[2]
        rows.append([str(config), str(n)] + [mean_sd(*stats.get((config, m), (None, None, 0))[:2], d)
                                             for _, m, d in columns])
    return Table(caption, ["configuration", "n"] + [h for h, _, _ in columns], rows)


def sections(inputs: SectionInputs) -> List[Any]:
    from reporting.report_document import Figure, Section

    out: List[Any] = []
    reference = load_reference()
    for pattern in sorted({r.pattern for r in inputs.runs}):
        runs = [r for r in inputs.runs if r.pattern == pattern]
        own = inputs.summary[inputs.summary["pattern"] == pattern]
        blocks: List[Any] = []
        if pattern in set(reference["pattern"]):
            blocks.append(table3(inputs.summary, reference, pattern))
        blocks.append(metrics_table(own, TABLE3 + _EXTRA,
                                     "PRESPS metrics of every configuration (mean ± sd; TD = throughput degradation)"))
        if any(r.manifest.resolved_config.get("pattern", {}).get("kind") == "spikes" for r in runs):
            blocks.append(_workload_table(runs))
        path = _figure(inputs, pattern, runs)
        if path is not None:
            blocks.append(Figure("Replicas and throughput over time (analogues of the paper's Fig. 3)", path))
        out.append(Section(f"PRESPS: pattern {pattern}", blocks))
    return out


PRESPS = register_report(EvaluationReport(
    name="presps", reference=load_reference, claims=check_claims, run_metrics=run_metrics, metric_names=METRICS,
    sections=sections, platform_pattern_sections=False, tables=TABLES,
    summary_columns=(*TABLE3, ("TD 1 s", "throughput_degradation_1s", 4), ("TD 30 s", "throughput_degradation_30s", 4),
                     ("mean active", "mean_active_replicas", 2), ("restarts", "restarts", 0),
                     ("timed out", "dropped_timeout", 0), ("purged", "dropped_purge", 0))))
# The live, scaled-down chain (evaluation presps_live): the same metrics, Table 3 and claims.
register_report(PRESPS, "presps_live")
# On the OEE topology the platform's compliance and cost sections stay, PRESPS's metrics join them.
register_report(EvaluationReport(
    name="presps_oee", reference=load_reference, claims=check_claims, run_metrics=run_metrics, metric_names=METRICS,
    sections=sections, platform_pattern_sections=True, tables=TABLES,
    summary_columns=(("saved resources", "saved_resources", 4), ("TD 30 s", "throughput_degradation_30s", 4),
                     ("proc. ratio", "processed_ratio", 4), ("latency ms", "latency_ms", 1),
                     ("RT %", "realtime_compliance_pct", 1), ("mean active", "mean_active_replicas", 2),
                     ("restarts", "restarts", 0))))
