"""Metrics of spec §12 from event logs, and the per-pattern comparison table (pandas).

Input is run folders only (via testbed.eventlog): the manifest's resolved config gives the SLOs,
the excluded operators and the billing parameters; the tables give everything else.

Billing: a run of the BTU policy (manifest policy "btu") is billed under its own BTU. Every other
policy is BTU-agnostic and, as in the paper, the *same* run is re-billed under each of
billing.rebill_minutes: one compliance value, one cost per BTU length.

Output (`summarise`) is the long format of experiments/reference/paper_btu_results.csv:
pattern, approach, btu_minutes, metric, mean, sd, followed by n (values averaged) and config.
btu_minutes is empty for the BTU-independent metrics of BTU-agnostic runs.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd

from testbed.billing import paid_btus, price_per_btu
from testbed.policies.btu import release_window_s
from testbed.eventlog import EventLog, EventLogError, Manifest, find_runs, read_manifest

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


def is_btu_based(policy: str) -> bool:
    return policy == "btu"


def billing_btus(manifest: Manifest, where: Path) -> List[int]:
    """BTU lengths (minutes) a run is billed under: its own for "btu", all rebill lengths otherwise."""
    if is_btu_based(manifest.policy):
        return [int(manifest.btu_minutes)]
    return sorted({int(m) for m in config_value(manifest.resolved_config, "billing.rebill_minutes", where)})


# ---- one run ----------------------------------------------------------------------------------

def _compliance_shares(samples: pd.DataFrame, slo_ms: Dict[str, float]) -> Dict[str, float]:
    """Share of samples complying at each level; NaN without samples."""
    if samples.empty:
        return {level: math.nan for level, _ in LEVELS}
    slo = samples["operator"].map(slo_ms).to_numpy(dtype=float)
    durations = samples["duration_ms"].to_numpy(dtype=float)
    return {level: float(np.mean(durations <= factor * slo)) for level, factor in LEVELS}


def _episodes(times: np.ndarray, compliant: np.ndarray) -> List[float]:
    """Violation episodes of one operator: from the first violating sample after a compliant one
    to the next compliant sample. Leading violations (no compliant sample before) and an episode
    still open at the run's end are not counted: their length is unknown."""
    lengths: List[float] = []
    seen_compliant = False
    start: Optional[float] = None
    for t, ok in zip(times, compliant):
        if ok:
            if start is not None:
                lengths.append(float(t - start))
                start = None
            seen_compliant = True
        elif seen_compliant and start is None:
            start = float(t)
    return lengths


def _time_to_adapt(samples: pd.DataFrame, slo_ms: Dict[str, float]) -> float:
    """Mean episode length over all episodes of all operators (all operators, none excluded)."""
    lengths: List[float] = []
    for operator in sorted(samples["operator"].unique()):
        own = samples[samples["operator"] == operator].sort_values("t_s", kind="mergesort")
        ok = own["duration_ms"].to_numpy(dtype=float) <= slo_ms[operator]
        lengths.extend(_episodes(own["t_s"].to_numpy(dtype=float), ok))
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


def run_metrics(run_dir: PathLike) -> Dict[str, Any]:
    """Metrics of one run: the BTU-independent metrics as top-level keys, and under "by_btu" a dict
    {btu_minutes: {cost metric: value}} with one entry per BTU length the run is billed under."""
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    cfg = manifest.resolved_config
    log = EventLog(run_dir)
    samples, processed = log.read("samples"), log.read("processed")
    actions, leases = log.read("actions"), log.read("leases")

    operators = config_value(cfg, "topology.operators", run_dir)
    slo_ms = {op: float(config_value(cfg, f"topology.operators.{op}.slo_ms", run_dir)) for op in sorted(operators)}
    unknown = sorted(set(samples["operator"]) - set(slo_ms))
    if unknown:
        raise SummaryError(f"{run_dir}: samples of operators without an SLO in the config: {unknown}")
    excluded = set(config_value(cfg, "topology.compliance_excluded", run_dir))
    penalty_per_item = float(config_value(cfg, "billing.penalty_per_item", run_dir))

    headline = _compliance_shares(samples[~samples["operator"].isin(excluded)], slo_ms)
    overall = _compliance_shares(samples, slo_ms)
    items = int(processed["items"].sum())

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
    counts = actions["action"].value_counts()
    for name, action in _ACTION_COUNTS.items():
        metrics[name] = float(counts.get(action, 0))
    metrics["time_to_adapt_s"] = _time_to_adapt(samples, slo_ms)
    metrics["by_btu"] = {m: _cost_metrics(leases, m, penalties, cfg, run_dir)
                         for m in billing_btus(manifest, run_dir)}
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


def _long_rows(manifest: Manifest, metrics: Dict[str, Any]) -> List[Dict[str, Any]]:
    approach, own = manifest.policy, is_btu_based(manifest.policy)
    base = {"pattern": manifest.pattern, "approach": approach, "config": manifest.config}
    rows = []
    by_btu: Dict[int, Dict[str, float]] = metrics["by_btu"]
    # A BTU run has one BTU, so all its metrics belong to it; a BTU-agnostic run's
    # BTU-independent metrics hold for every BTU length (btu_minutes left empty, as in the paper).
    independent_btu = next(iter(by_btu)) if own else pd.NA
    for name in BTU_INDEPENDENT_METRICS:
        rows.append({**base, "btu_minutes": independent_btu, "metric": name, "value": metrics[name]})
    for minutes in sorted(by_btu):
        for name in BTU_DEPENDENT_METRICS:
            rows.append({**base, "btu_minutes": minutes, "metric": name, "value": by_btu[minutes][name]})
    return rows


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
    rows: List[Dict[str, Any]] = []
    for run_dir, manifest in complete:
        rows.extend(_long_rows(manifest, run_metrics(run_dir)))
    if rows:
        long = pd.DataFrame(rows)
        long["btu_minutes"] = long["btu_minutes"].astype("Int64")
        keys = ["pattern", "approach", "config", "btu_minutes", "metric"]
        grouped = long.groupby(keys, dropna=False, sort=False)["value"]
        out = grouped.agg(mean="mean", sd=lambda v: v.std(ddof=1), n="count").reset_index()
        rank = {name: i for i, name in enumerate(METRICS)}
        out = out.assign(_rank=out["metric"].map(rank), _btu=out["btu_minutes"].fillna(-1))
        out = out.sort_values(["pattern", "config", "_btu", "_rank"], kind="mergesort")
        out = out[COLUMNS].reset_index(drop=True)
    else:
        out = pd.DataFrame({c: pd.Series(dtype="Int64" if c == "btu_minutes" else object) for c in COLUMNS})
    out.attrs["incomplete_runs"] = [str(d) for d, m in runs if m.status != "complete"]
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


def _table_rows(df: pd.DataFrame) -> List[Tuple[Tuple[Any, ...], str, Dict[str, Tuple[Any, Any]]]]:
    """One row per (configuration, BTU length): (sort key, label, metric -> (mean, sd))."""
    btu = pd.to_numeric(df["btu_minutes"], errors="coerce").astype("Int64")
    config = df["config"] if "config" in df.columns else pd.Series(
        [f"btu-{b}" if a == "btu" else a for a, b in zip(df["approach"], btu)], index=df.index)
    values: Dict[Tuple[str, str, Optional[int], str], Tuple[Any, Any]] = {}
    for a, c, b, m, mean, sd in zip(df["approach"], config, btu, df["metric"], df["mean"], df["sd"]):
        values[(str(a), str(c), None if pd.isna(b) else int(b), str(m))] = (mean, sd)
    keys = sorted({(a, c, b) for a, c, b, _ in values}, key=lambda k: (k[0], k[1], -1 if k[2] is None else k[2]))
    with_btu = {(a, c) for a, c, b in keys if b is not None}
    rows = []
    for a, c, b in keys:
        if b is None and (a, c) in with_btu:
            continue  # BTU-independent values are shown in each BTU row of the configuration
        cells = {m: values.get((a, c, b, m), values.get((a, c, None, m), (None, None)))
                 for _, m, _ in _TABLE_COLUMNS}
        btu_based = is_btu_based(a)
        label = c if btu_based or b is None else f"{c}@{b}"
        # BTU-agnostic configurations first (the baseline, by config then BTU), then the BTU
        # policy by BTU length; plain tuples so the order never depends on input order
        minutes = -1 if b is None else b
        rows.append(((1, minutes, c) if btu_based else (0, c, minutes), label, cells))
    return sorted(rows, key=lambda r: r[0])


def format_summary(df: pd.DataFrame) -> str:
    """Fixed-width table per pattern: one row per configuration and BTU length, "mean ±sd" cells."""
    blocks = []
    for pattern in sorted(df["pattern"].astype(str).unique()):
        rows = _table_rows(df[df["pattern"].astype(str) == pattern])
        header = ["config"] + [h for h, _, _ in _TABLE_COLUMNS]
        lines = [[label] + [_cell(*cells[m], d) for _, m, d in _TABLE_COLUMNS] for _, label, cells in rows]
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
