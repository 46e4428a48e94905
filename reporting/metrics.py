"""The metrics of spec §12 of one run from its event log, and their long format (pandas).

Input is run folders only (via testbed.eventlog): the manifest's resolved config gives the SLOs,
the excluded operators and the billing parameters; the tables give everything else.

Billing comes from the manifest (`billing_of`, the one place reporting reads it): a run billed "own"
(the BTU policy) pays under the BTU length it ran with; a "rebill" run (a BTU-agnostic approach) is,
as in the paper, re-billed under each of billing.rebill_minutes: one compliance value, one cost per
BTU length.

The metrics of a run are computed from its totals (`RunTotals`: per-operator sample counts,
processed items, action counts, time to adapt, leases) by `metrics_from_totals`; this module gets
the totals with pandas (`run_totals`), the Spark report (reporting.spark_passes) with Spark, and
both derive the metrics and the long rows with the functions below (reporting.summary takes the
mean and sd over repetitions).

The long format is that of experiments/reference/paper_btu_results.csv: pattern, approach,
btu_minutes, metric, mean, sd, followed by n (values averaged) and config. btu_minutes is empty for
the BTU-independent metrics of re-billed runs (`rebilled` reads that back).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence, Tuple, Union

import numpy as np
import pandas as pd

from testbed.backend_registry import configuration_on
from testbed.billing import paid_btus, price_per_btu
from testbed.eventlog import BILLING_MODES, EventLog, Manifest, billing_mode, read_manifest
from testbed.policies.btu import release_window_s

# compliance levels: a sample complies at a level when duration_ms <= factor * slo_ms
LEVELS: Tuple[Tuple[str, float], ...] = (("realtime", 1.0), ("near_realtime", 2.0), ("relaxed", 5.0))
LEVEL_LABELS = {"realtime": "real-time", "near_realtime": "near real-time", "relaxed": "relaxed"}

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

# backend: the manifest's, so that readers of the aggregated table need not read it from the name
COLUMNS = ["pattern", "approach", "btu_minutes", "metric", "mean", "sd", "n", "config", "backend"]
LONG_KEYS = ["pattern", "approach", "config", "backend", "btu_minutes", "metric"]
_ACTION_COUNTS = {"vm_leases": "lease", "vm_prolongations": "prolong", "vm_releases": "release",
                  "scale_ups": "scale_up", "scale_downs": "scale_down", "migrations": "migrate"}

# Release window when the resolved config does not give one (spec §8: 5 % of the BTU, at least
# one reasoning interval).
_DEFAULT_RELEASE_FRACTION = 0.05
_DEFAULT_REASONING_S = 60.0

PathLike = Union[str, Path]


class SummaryError(ValueError):
    """Runs that cannot be summarised; the message names the folder, file or config key."""


class SummaryInputError(SummaryError):
    """A bad argument of `testbed summary` (no such runs folder, no runs in it): exit status 2."""


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
    return pd.Series([f"{a}-{int(b)}" if a in own and not pd.isna(b) else str(a)
                      for a, b in zip(df["approach"], btu, strict=True)],
                     index=df.index)


def ran_configurations(df: pd.DataFrame) -> pd.Series:
    """Per row of a long-format table: the configuration it ran (`configurations`), less what the
    row's backend (its `backend` column, from the runs' manifests) adds to run folders' names, so a
    live run `btu-10-live` counts as `btu-10`. A table without the column (the paper's, or a summary
    written before the column existed) is read as it is named: each name its own configuration."""
    config = configurations(df)
    if "backend" not in df.columns:
        return config
    return pd.Series([configuration_on(c, str(b)) for c, b in zip(config, df["backend"], strict=True)],
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


def long_rows(manifest: Manifest, metrics: Mapping[str, Any], where: Path,
              independent: Sequence[str] = BTU_INDEPENDENT_METRICS) -> List[Dict[str, Any]]:
    """One row per metric value of a run (run_metrics's result), keyed by LONG_KEYS."""
    base = {"pattern": manifest.pattern, "approach": manifest.policy, "config": manifest.config,
            "backend": manifest.backend}
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
