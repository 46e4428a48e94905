"""Metrics of spec §12 from event logs, and the per-pattern comparison table (pandas).

Input is run folders only (via testbed.eventlog): the manifest's resolved config gives the SLOs,
the excluded operators and the billing parameters; the tables give everything else.

Billing comes from the manifest (`billing_of`, the one place reporting reads it): a run billed "own"
(the BTU policy) pays under the BTU length it ran with; a "rebill" run (a BTU-agnostic approach) is,
as in the paper, re-billed under each of billing.rebill_minutes: one compliance value, one cost per
BTU length.

The metrics of a run are computed from its totals (`RunTotals`: per-operator sample counts,
processed items, action counts, time to adapt, leases) by `metrics_from_totals`; this module gets
the totals with pandas, the Spark report (reporting.spark_passes) with Spark, and both derive the
metrics, the long rows and the mean/sd over repetitions with the functions below.

Output (`summarise`) is the long format of experiments/reference/paper_btu_results.csv:
pattern, approach, btu_minutes, metric, mean, sd, followed by n (values averaged) and config.
btu_minutes is empty for the BTU-independent metrics of re-billed runs (`rebilled` reads that back).
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Hashable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd

from testbed.billing import paid_btus, price_per_btu
from testbed.policies.btu import release_window_s
from testbed.eventlog import BILLING_MODES, EventLog, EventLogError, Manifest, billing_mode, find_runs, read_manifest

# compliance levels: a sample complies at a level when duration_ms <= factor * slo_ms
LEVELS: Tuple[Tuple[str, float], ...] = (("realtime", 1.0), ("near_realtime", 2.0), ("relaxed", 5.0))

# Metrics that do not depend on the BTU length used for billing, then those that do, in report order.
BTU_INDEPENDENT_METRICS: Tuple[str, ...] = (
    *(f"{level}_compliance_pct" for level, _ in LEVELS),
    *(f"{level}_compliance_all_pct" for level, _ in LEVELS),
    "processed_items",
    *(f"{level}_penalty" for level, _ in LEVELS),
    "vm_leases", "vm_prolongations", "vm_releases", "scale_ups", "scale_downs", "migrations",
    "time_to_adapt_s",
)
BTU_DEPENDENT_METRICS: Tuple[str, ...] = (
    "paid_btus", "resource_cost", *(f"{level}_total_cost" for level, _ in LEVELS), "vm_early_releases",
)
METRICS: Tuple[str, ...] = BTU_INDEPENDENT_METRICS + BTU_DEPENDENT_METRICS

COLUMNS = ["pattern", "approach", "btu_minutes", "metric", "mean", "sd", "n", "config"]
LONG_KEYS = ["pattern", "approach", "config", "btu_minutes", "metric"]
_ACTION_COUNTS = {"vm_leases": "lease", "vm_prolongations": "prolong", "vm_releases": "release",
                  "scale_ups": "scale_up", "scale_downs": "scale_down", "migrations": "migrate"}

# Release window when the resolved config does not give one (spec §8: 5 % of the BTU, at least
# one reasoning interval).
_DEFAULT_RELEASE_FRACTION = 0.05
_DEFAULT_REASONING_S = 60.0

PathLike = Union[str, Path]


class SummaryError(ValueError):
    """Runs that cannot be summarised; the message names the folder, file or config key."""


def config_value(cfg: Dict[str, Any], key: str, where: Path, default: Any = ...) -> Any:
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            if default is not ...:
                return default
            raise SummaryError(f"{where}: resolved_config has no {key!r}")
        node = node[part]
    return node


# ---- billing -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Billing:
    own: bool  # billed by the BTU length the run used; False: re-billed under each rebill length
    btu_minutes: Tuple[int, ...]  # the BTU lengths the run is billed under


def billing_of(manifest: Manifest, where: Path) -> Billing:
    """How a run is billed, from its manifest (`billing`: "own" or "rebill"; older manifests without
    the field: testbed.eventlog.billing_mode's rule). The one place reporting reads it."""
    mode = billing_mode(manifest)
    if mode == "own":
        return Billing(True, (int(manifest.btu_minutes),))
    if mode == "rebill":
        minutes = config_value(manifest.resolved_config, "billing.rebill_minutes", where)
        return Billing(False, tuple(sorted({int(m) for m in minutes})))
    raise SummaryError(f"{where}: manifest billing {mode!r} is none of {list(BILLING_MODES)}")


def rebilled(rows: pd.DataFrame) -> bool:
    """Whether the rows of one configuration in a table of this module's long format come from
    re-billed runs: their BTU-independent metrics have no BTU length, while a run billed by its own
    BTU has every metric under that BTU (as in the paper's table)."""
    return bool(pd.to_numeric(rows["btu_minutes"], errors="coerce").isna().any())


def configurations(df: pd.DataFrame) -> pd.Series:
    """The configuration of each row of a long-format table: its config column, or in a table
    without one (the paper's) its approach, named <approach>-<BTU> where the approach is billed by
    its own BTU (as testbed.experiment names such configurations)."""
    if "config" in df.columns:
        return df["config"].astype(str)
    own = {a for a, rows in df.groupby("approach") if not rebilled(rows)}
    btu = pd.to_numeric(df["btu_minutes"], errors="coerce")
    return pd.Series([f"{a}-{int(b)}" if a in own and not pd.isna(b) else str(a) for a, b in zip(df["approach"], btu)],
                     index=df.index)


# ---- one run ----------------------------------------------------------------------------------

@dataclass
class RunTotals:
    """What the metrics of one run are computed from."""
    compliance: pd.DataFrame  # one row per operator (index): n samples, ok_<level> samples complying
    items: int  # processed items
    actions: Mapping[str, int]  # count per action
    time_to_adapt_s: float  # mean violation episode length, NaN without episodes
    leases: pd.DataFrame  # the run's leases table


def slos(manifest: Manifest, where: Path) -> Dict[str, float]:
    cfg = manifest.resolved_config
    operators = config_value(cfg, "topology.operators", where)
    return {op: float(config_value(cfg, f"topology.operators.{op}.slo_ms", where)) for op in sorted(operators)}


def check_operators(operators: Sequence[str], slo_ms: Mapping[str, float], where: Path) -> None:
    unknown = sorted(set(operators) - set(slo_ms))
    if unknown:
        raise SummaryError(f"{where}: samples of operators without an SLO in the config: {unknown}")


def _operator_slos(operators: pd.Series, slo_ms: Mapping[str, float]) -> np.ndarray:
    """Each sample's SLO (NaN: none), looked up once per distinct operator rather than per sample
    (Series.map over the 170,000 samples of a run took a quarter of its summary)."""
    codes, names = pd.factorize(operators)
    per_code = np.array([slo_ms.get(n, math.nan) for n in names] + [math.nan], dtype=float)
    return per_code[codes]  # code -1 (a missing operator) picks the NaN at the end


def compliance_counts(samples: pd.DataFrame, slo_ms: Mapping[str, float]) -> pd.DataFrame:
    """Per operator: samples (n) and samples within factor x SLO at each level (ok_<level>)."""
    slo = _operator_slos(samples["operator"], slo_ms)
    durations = samples["duration_ms"].to_numpy(dtype=float)
    flags = pd.DataFrame({f"ok_{level}": durations <= factor * slo for level, factor in LEVELS})
    flags.insert(0, "n", 1)
    counts = flags.groupby(samples["operator"].to_numpy()).sum()
    return counts.astype("int64").rename_axis("operator")


def _compliance_shares(counts: pd.DataFrame) -> Dict[str, float]:
    """Share of samples complying at each level; NaN without samples."""
    n = int(counts["n"].sum())
    if n == 0:
        return {level: math.nan for level, _ in LEVELS}
    return {level: int(counts[f"ok_{level}"].sum()) / n for level, _ in LEVELS}


def _episodes(times: np.ndarray, compliant: np.ndarray) -> List[float]:
    """Violation episodes of one operator: from the first violating sample after a compliant one
    to the next compliant sample. Leading violations (no compliant sample before) and an episode
    still open at the run's end are not counted: their length is unknown."""
    change = np.diff(np.asarray(compliant, dtype=np.int8))
    starts = np.flatnonzero(change == -1) + 1  # a violation right after a compliant sample
    ends = np.flatnonzero(change == 1) + 1  # a compliant sample right after a violation
    if len(starts):
        ends = ends[ends > starts[0]]  # the end of leading violations is no episode's
    n = min(len(starts), len(ends))  # an episode without an end is left out
    times = np.asarray(times, dtype=float)
    return (times[ends[:n]] - times[starts[:n]]).tolist()


def _time_to_adapt(samples: pd.DataFrame, slo_ms: Dict[str, float]) -> float:
    """Mean episode length over all episodes of all operators (all operators, none excluded)."""
    lengths: List[float] = []
    codes, names = pd.factorize(samples["operator"])
    times, durations = samples["t_s"].to_numpy(dtype=float), samples["duration_ms"].to_numpy(dtype=float)
    for code, operator in sorted(enumerate(names), key=lambda c: c[1]):
        own = np.flatnonzero(codes == code)  # its samples in table order, then stably by time
        own = own[np.argsort(times[own], kind="stable")]
        lengths.extend(_episodes(times[own], durations[own] <= slo_ms[operator]))
    return float(np.mean(lengths)) if lengths else math.nan


def release_window_from_config(cfg: Dict[str, Any], btu_s: float, where: Path) -> float:
    fraction = float(config_value(cfg, "policy.release_window_fraction", where, _DEFAULT_RELEASE_FRACTION))
    reasoning_s = float(config_value(cfg, "runtime.reasoning_s", where, _DEFAULT_REASONING_S))
    minimum_s = float(config_value(cfg, "policy.release_window_min_s", where, 0.0))
    return release_window_s(fraction, minimum_s, btu_s, reasoning_s)


def _lease_btus(lease: pd.Series, btu_s: float, where: Path) -> int:
    # Under the BTU the run was billed with, the stored count is what was paid (a prolongation pays
    # the next BTU ahead, even if the run ends before it starts). Re-billing applies ⌈duration/BTU⌉.
    if math.isclose(float(lease["btu_s"]), btu_s):
        return int(lease["paid_btus"])
    try:
        return paid_btus(float(lease["start_s"]), float(lease["end_s"]), btu_s)
    except ValueError as exc:
        raise SummaryError(f"{where}: lease of host {lease['host']!r}: {exc}") from exc


def _cost_metrics(leases: pd.DataFrame, btu_minutes: int, penalties: Dict[str, float],
                  cfg: Dict[str, Any], where: Path) -> Dict[str, float]:
    btu_s = btu_minutes * 60.0
    price = price_per_btu(btu_minutes, float(config_value(cfg, "billing.price_per_10_minutes", where)))
    window_s = release_window_from_config(cfg, btu_s, where)
    total_btus, early = 0, 0
    for _, lease in leases.iterrows():
        btus = _lease_btus(lease, btu_s, where)
        total_btus += btus
        # Early release = paid time wasted beyond the policy's own release window (spec §8). The BTU
        # policy releases *within* the last max(5 % BTU, reasoning interval) of a BTU by design; that
        # is "at the BTU end", not early. Only a release leaving more paid time unused is early.
        unused_s = float(lease["start_s"]) + btus * btu_s - float(lease["end_s"])
        if bool(lease["released"]) and unused_s > window_s:
            early += 1
    resource_cost = total_btus * price
    out: Dict[str, float] = {"paid_btus": float(total_btus), "resource_cost": resource_cost}
    for level, _ in LEVELS:
        out[f"{level}_total_cost"] = resource_cost + penalties[level]
    out["vm_early_releases"] = float(early)
    return out


def run_totals(run_dir: PathLike, manifest: Manifest) -> RunTotals:
    """The totals of one run, read from its event log with pandas."""
    run_dir = Path(run_dir)
    log = EventLog(run_dir)
    samples, processed = log.read("samples"), log.read("processed")
    actions, leases = log.read("actions"), log.read("leases")
    slo_ms = slos(manifest, run_dir)
    check_operators(samples["operator"].unique(), slo_ms, run_dir)
    counts = actions["action"].value_counts()
    return RunTotals(compliance_counts(samples, slo_ms), int(processed["items"].sum()),
                     {action: int(counts[action]) for action in counts.index},
                     _time_to_adapt(samples, slo_ms), leases)


def run_metrics(run_dir: PathLike) -> Dict[str, Any]:
    """Metrics of one run: the BTU-independent metrics as top-level keys, and under "by_btu" a dict
    {btu_minutes: {cost metric: value}} with one entry per BTU length the run is billed under."""
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    return metrics_from_totals(run_totals(run_dir, manifest), manifest, run_dir)


def metrics_from_totals(totals: RunTotals, manifest: Manifest, where: Path) -> Dict[str, Any]:
    """run_metrics's result from a run's totals (however they were computed)."""
    cfg = manifest.resolved_config
    check_operators(totals.compliance.index, slos(manifest, where), where)
    excluded = set(config_value(cfg, "topology.compliance_excluded", where))
    penalty_per_item = float(config_value(cfg, "billing.penalty_per_item", where))

    counts = totals.compliance
    headline = _compliance_shares(counts[~counts.index.isin(excluded)])
    overall = _compliance_shares(counts)
    items = totals.items

    metrics: Dict[str, Any] = {}
    for level, _ in LEVELS:
        metrics[f"{level}_compliance_pct"] = 100.0 * headline[level]
    for level, _ in LEVELS:
        metrics[f"{level}_compliance_all_pct"] = 100.0 * overall[level]
    metrics["processed_items"] = float(items)
    # penalty = price per delayed item x processed items x violation share (headline compliance)
    penalties = {level: penalty_per_item * items * (1.0 - headline[level]) for level, _ in LEVELS}
    for level, _ in LEVELS:
        metrics[f"{level}_penalty"] = penalties[level]
    for name, action in _ACTION_COUNTS.items():
        metrics[name] = float(totals.actions.get(action, 0))
    metrics["time_to_adapt_s"] = totals.time_to_adapt_s
    metrics["by_btu"] = {m: _cost_metrics(totals.leases, m, penalties, cfg, where)
                         for m in billing_of(manifest, where).btu_minutes}
    return metrics


# ---- many runs --------------------------------------------------------------------------------

def _runs(runs_root: PathLike) -> List[Tuple[Path, Manifest]]:
    root = Path(runs_root)
    if not root.is_dir():
        raise SummaryError(f"runs folder not found: {root}")
    dirs = find_runs(root)
    if not dirs:
        raise SummaryError(f"no runs (folders with manifest.json) below {root}")
    return [(d, read_manifest(d)) for d in dirs]


def incomplete_runs(runs_root: PathLike) -> pd.DataFrame:
    """Runs left out of the summary because their status is not "complete"."""
    rows = [{"run_dir": str(d), "pattern": m.pattern, "config": m.config, "rep": m.rep,
             "status": m.status, "error": m.error}
            for d, m in _runs(runs_root) if m.status != "complete"]
    return pd.DataFrame(rows, columns=["run_dir", "pattern", "config", "rep", "status", "error"])


def long_rows(manifest: Manifest, metrics: Mapping[str, Any], where: Path,
              independent: Sequence[str] = BTU_INDEPENDENT_METRICS) -> List[Dict[str, Any]]:
    """One row per metric value of a run (run_metrics's result), keyed by LONG_KEYS."""
    base = {"pattern": manifest.pattern, "approach": manifest.policy, "config": manifest.config}
    rows = []
    by_btu: Dict[int, Dict[str, float]] = metrics["by_btu"]
    # A run billed by its own BTU has one BTU, so all its metrics belong to it; a re-billed run's
    # BTU-independent metrics hold for every BTU length (btu_minutes left empty, as in the paper).
    independent_btu = next(iter(by_btu)) if billing_of(manifest, where).own else pd.NA
    for name in independent:
        rows.append({**base, "btu_minutes": independent_btu, "metric": name, "value": metrics[name]})
    for minutes in sorted(by_btu):
        for name in BTU_DEPENDENT_METRICS:
            rows.append({**base, "btu_minutes": minutes, "metric": name, "value": by_btu[minutes][name]})
    return rows


def _metric_rank(metric: str) -> Tuple[int, int]:
    """The platform's metrics in METRICS order, then an evaluation's own (reporting.evaluations)."""
    if metric in METRICS:
        return (0, METRICS.index(metric))
    from reporting.evaluations import metric_order

    extra = metric_order()
    return (1, extra.index(metric) if metric in extra else len(extra))


MeanSd = Callable[[Sequence[float]], Tuple[float, float]]


def mean_sd(long: pd.DataFrame, rank: Callable[[str], Hashable] = _metric_rank,
            statistics: Optional[MeanSd] = None) -> pd.DataFrame:
    """Mean, sample sd (ddof=1) and n (values that are not NaN) over the repetitions of each
    configuration, in COLUMNS, ordered by pattern, config, BTU (empty first) and rank(metric).
    statistics(values) -> (mean, sd) of the values that are not NaN, in repetition order; pandas'
    groupby mean and std without it."""
    if long.empty:
        return pd.DataFrame({c: pd.Series(dtype="Int64" if c == "btu_minutes" else object) for c in COLUMNS})
    long = long.assign(btu_minutes=pd.array(long["btu_minutes"], dtype="Int64"))
    grouped = long.groupby(LONG_KEYS, dropna=False, sort=False)["value"]
    if statistics is None:
        out = grouped.agg(mean="mean", sd=lambda v: v.std(ddof=1), n="count").reset_index()
    else:
        stats = grouped.agg(stats=lambda v: statistics(v.dropna().tolist()), n="count").reset_index()
        out = stats.assign(mean=[m for m, _ in stats["stats"]], sd=[sd for _, sd in stats["stats"]])
    out = out.assign(_rank=out["metric"].map(rank), _btu=out["btu_minutes"].fillna(-1))
    out = out.sort_values(["pattern", "config", "_btu", "_rank"], kind="mergesort")
    return out[COLUMNS].reset_index(drop=True)


def summarise(runs_root: PathLike) -> pd.DataFrame:
    """Mean and sample sd (ddof=1) over the repetitions of each configuration (pattern, config).

    Only complete runs count; the others are listed in `.attrs["incomplete_runs"]` (paths) and by
    `incomplete_runs()`. NaN values (e.g. no adaptation episode) are left out of mean and sd; `n`
    is the number of values used."""
    runs = _runs(runs_root)
    complete = [(d, m) for d, m in runs if m.status == "complete"]
    experiments = sorted({m.experiment for _, m in complete})
    if len(experiments) > 1:
        raise SummaryError(f"{runs_root}: runs of several experiments {experiments}; summarise one experiment folder")
    from reporting.evaluations import evaluation_metrics

    rows: List[Dict[str, Any]] = []
    for run_dir, manifest in complete:
        values = run_metrics(run_dir)
        extra = evaluation_metrics(run_dir, manifest)  # the evaluation's own metrics (e.g. PRESPS's)
        values.update(extra)
        rows.extend(long_rows(manifest, values, run_dir, independent=[*BTU_INDEPENDENT_METRICS, *extra]))
    out = mean_sd(pd.DataFrame(rows))
    out.attrs["incomplete_runs"] = [str(d) for d, m in runs if m.status != "complete"]
    out.attrs["evaluation"] = experiments[0] if experiments else ""
    return out


# ---- the readable table -----------------------------------------------------------------------

# (header, metric, decimals)
_TABLE_COLUMNS: Tuple[Tuple[str, str, int], ...] = (
    ("RT %", "realtime_compliance_pct", 1),
    ("NRT %", "near_realtime_compliance_pct", 1),
    ("relaxed %", "relaxed_compliance_pct", 1),
    ("paid BTUs", "paid_btus", 1),
    ("resource", "resource_cost", 2),
    ("penalty RT", "realtime_penalty", 2),
    ("penalty NRT", "near_realtime_penalty", 2),
    ("penalty rel", "relaxed_penalty", 2),
    ("total RT", "realtime_total_cost", 2),
    ("total NRT", "near_realtime_total_cost", 2),
    ("total rel", "relaxed_total_cost", 2),
)


def _cell(mean: Any, sd: Any, decimals: int) -> str:
    if mean is None or pd.isna(mean):
        return "-"
    text = f"{float(mean):.{decimals}f}"
    if sd is not None and not pd.isna(sd):
        text += f" ±{float(sd):.{decimals}f}"
    return text


def _table_rows(df: pd.DataFrame, columns: Sequence[Tuple[str, str, int]] = _TABLE_COLUMNS
                ) -> List[Tuple[Tuple[Any, ...], str, Dict[str, Tuple[Any, Any]]]]:
    """One row per (configuration, BTU length): (sort key, label, metric -> (mean, sd)); one row per
    configuration when none of the columns depends on the BTU length."""
    btu = pd.to_numeric(df["btu_minutes"], errors="coerce").astype("Int64")
    config = configurations(df)
    rebilled_configs = {c for c, rows in df.groupby(config) if rebilled(rows)}
    values: Dict[Tuple[str, str, Optional[int], str], Tuple[Any, Any]] = {}
    for a, c, b, m, mean, sd in zip(df["approach"], config, btu, df["metric"], df["mean"], df["sd"]):
        values[(str(a), str(c), None if pd.isna(b) else int(b), str(m))] = (mean, sd)
    keys = sorted({(a, c, b) for a, c, b, _ in values}, key=lambda k: (k[0], k[1], -1 if k[2] is None else k[2]))
    if not any(m in BTU_DEPENDENT_METRICS for _, m, _ in columns):  # one row per configuration
        free = {(a, c) for a, c, b in keys if b is None}
        keys = [k for k in keys if k[2] is None or (k[0], k[1]) not in free]
    with_btu = {(a, c) for a, c, b in keys if b is not None}
    rows = []
    for a, c, b in keys:
        if b is None and (a, c) in with_btu:
            continue  # BTU-independent values are shown in each BTU row of the configuration
        cells = {m: values.get((a, c, b, m), values.get((a, c, None, m), (None, None)))
                 for _, m, _ in columns}
        own = c not in rebilled_configs
        label = c if own or b is None else f"{c}@{b}"
        # re-billed configurations first (the baseline, by config then BTU), then those billed by
        # their own BTU by BTU length; plain tuples so the order never depends on input order
        minutes = -1 if b is None else b
        rows.append(((1, minutes, c) if own else (0, c, minutes), label, cells))
    return sorted(rows, key=lambda r: r[0])


def format_summary(df: pd.DataFrame) -> str:
    """Fixed-width table per pattern: one row per configuration and BTU length, "mean ±sd" cells."""
    from reporting.evaluations import report_for

    columns = _TABLE_COLUMNS
    if df.attrs.get("evaluation"):  # an evaluation may print its own metrics (e.g. PRESPS's Table 3)
        columns = report_for(df.attrs["evaluation"]).summary_columns or _TABLE_COLUMNS
    blocks = []
    for pattern in sorted(df["pattern"].astype(str).unique()):
        rows = _table_rows(df[df["pattern"].astype(str) == pattern], columns)
        header = ["config"] + [h for h, _, _ in columns]
        lines = [[label] + [_cell(*cells[m], d) for _, m, d in columns] for _, label, cells in rows]
        widths = [max(len(r[i]) for r in [header, *lines]) for i in range(len(header))]

        def fmt(r: Sequence[str]) -> str:
            return "  ".join([r[0].ljust(widths[0])] + [v.rjust(w) for v, w in zip(r[1:], widths[1:])])

        blocks.append("\n".join([f"pattern: {pattern}", fmt(header), "-" * len(fmt(header))] + [fmt(r) for r in lines]))
    return "\n\n".join(blocks) + "\n" if blocks else "(no complete runs)\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`testbed summary RUNS_DIR`: print the table, write RUNS_DIR/summary.csv."""
    parser = argparse.ArgumentParser(prog="testbed summary", description=__doc__.splitlines()[0])
    parser.add_argument("runs_dir", type=Path, help="folder of run folders (e.g. runs/<experiment>)")
    args = parser.parse_args(argv)
    try:
        df = summarise(args.runs_dir)
    except (SummaryError, EventLogError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(format_summary(df), end="")
    for run in df.attrs["incomplete_runs"]:
        print(f"not complete, left out: {run}")
    out = args.runs_dir / "summary.csv"
    df.to_csv(out, index=False)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
