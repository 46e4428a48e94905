"""Simulator vs Flink: when a runs folder holds a configuration both simulated (`daedalus`) and run on
a real Flink (`daedalus-flink`) on the same workload, their figures side by side, with the gap.

A Flink run compresses the paper's time by f (`time_compression` in its manifest): its durations
(latency, rescale downtimes) are real ones, f times shorter than the paper time the simulator runs
in. Both columns are given in the paper's time: the engine's ms and s x f. Workers and rescale
counts need no scaling (a time-average and a count)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

import numpy as np
import pandas as pd

from reporting.evaluations.daedalus import measures as dd
from reporting.live_gap import LiveValues, pair_configs
from testbed.backend_registry import run_configuration
from testbed.eventlog import EventLog, Manifest, read_manifest

ENGINE = "flink"  # the backend compared with the simulator, as run manifests name it
# (column, header, decimals, gap: "diff" = sim - Flink, "ratio" = sim / Flink)
MEASURES: Tuple[Tuple[str, str, int, str], ...] = (
    ("mean_workers", "workers", 2, "diff"), ("rescales", "rescales", 1, "diff"),
    ("latency_ms", "latency ms", 0, "ratio"), ("latency_p95_ms", "p95 ms", 0, "ratio"),
    ("downtime_out_s", "downtime out s", 0, "ratio"), ("downtime_in_s", "downtime in s", 0, "ratio"))


def run_figures(run_dir: Path, m: Manifest) -> Dict[str, float]:
    """One run's figures in the paper's time: mean workers, rescales, latency mean and p95 (ms), mean
    measured rescale downtime per direction (s)."""
    f = float(m.details.get("time_compression", 1.0)) if m.backend == ENGINE else 1.0
    met = dd.run_metrics(Path(run_dir))
    out = {"mean_workers": met["mean_workers"], "rescales": met["rescales"],
           "latency_ms": met["latency_ms"] * f, "latency_p95_ms": met["latency_p95_ms"] * f}
    log = EventLog(run_dir)
    res = log.read("rescales") if log.has("rescales") else pd.DataFrame(columns=["from_n", "to_n", "downtime_s"])
    for key, up in (("downtime_out_s", True), ("downtime_in_s", False)):
        d = res[(res.to_n > res.from_n) == up].downtime_s.to_numpy(dtype=float)
        d = d[np.isfinite(d)]
        out[key] = float(d.mean()) * f if d.size else math.nan
    return out


def pairs(runs: Iterable[Tuple[str, str, Path]]) -> pd.DataFrame:
    """Per run (pattern, config, run_dir) of a configuration that exists both simulated and on Flink in
    its workload (as the runs' manifests say, paired as the live gap pairs them): pattern, config (the
    configuration, without what the backend adds to the folder's name), side (sim | flink) and
    run_figures."""
    found = [(p, Path(d), read_manifest(d)) for p, _, d in runs]
    sides = {(p, m.config): (run_configuration(m), m.backend) for p, _, m in found}
    paired, _ = pair_configs(sides, sides, ENGINE)
    side_of = {**{(pair.pattern, pair.sim): (pair.config, "sim") for pair in paired},
               **{(pair.pattern, pair.other): (pair.config, "flink") for pair in paired}}
    rows = []
    for p, d, m in found:
        if (p, m.config) in side_of:
            base, side = side_of[(p, m.config)]
            rows.append({"pattern": p, "config": base, "side": side, **run_figures(d, m)})
    return pd.DataFrame(rows)


SIDES = ("sim", "flink")


def side_by_side(per_run: pd.DataFrame) -> pd.DataFrame:
    """Per pattern and configuration: n runs per side, then per measure and side <measure>_<side> (the
    median of its runs: one run differs from the next, a Flink run by what else the machine ran, and
    the median is not pulled by one odd run), <measure>_<side>_min and _max (their range), and
    <measure>_gap (sim - Flink for workers and rescales, sim / Flink for latencies and downtimes,
    between the medians)."""
    cols = ["pattern", "config", "n_sim", "n_flink"] + [f"{m}_{side}{part}" for m, *_ in MEASURES
                                                        for side in SIDES for part in ("", "_min", "_max")] \
        + [f"{m}_gap" for m, *_ in MEASURES]
    if per_run.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for (p, c), g in per_run.groupby(["pattern", "config"], sort=False):
        row: Dict[str, Any] = {"pattern": p, "config": c,
                               **{f"n_{side}": int((g.side == side).sum()) for side in SIDES}}
        for m, _, _, gap in MEASURES:
            for side in SIDES:
                spread = LiveValues.of(g[g.side == side][m])  # median and range of the runs that have the value
                row.update({f"{m}_{side}": spread.median, f"{m}_{side}_min": spread.low,
                            f"{m}_{side}_max": spread.high})
            a, b = row[f"{m}_sim"], row[f"{m}_flink"]
            row[f"{m}_gap"] = a - b if gap == "diff" else (a / b if b else math.nan)
        rows.append(row)
    return pd.DataFrame(rows, columns=cols)


def overlaps(r: Any, m: str) -> Optional[bool]:
    """Whether the two sides' ranges of measure m overlap (a gap within the spread is not one the runs
    measured); None where a side has no value."""
    lows = [r[f"{m}_{side}_min"] for side in SIDES]
    highs = [r[f"{m}_{side}_max"] for side in SIDES]
    if not all(math.isfinite(v) for v in (*lows, *highs)):
        return None
    return bool(max(lows) <= min(highs))


def _relative_spread(r: Any, m: str, side: str) -> float:
    """(max - min) / median of one side's runs; NaN without a positive median."""
    mid, low, high = r[f"{m}_{side}"], r[f"{m}_{side}_min"], r[f"{m}_{side}_max"]
    return (high - low) / mid if math.isfinite(mid) and mid > 0 and math.isfinite(low) else math.nan


def spread_text(table: pd.DataFrame, pattern: str) -> str:
    """What the repetitions say about one workload's comparison: the runs per side, each side's widest
    spread, and which gaps lie within it."""
    t = table[table.pattern == pattern]
    runs = ", ".join(f"{r.config} {r.n_sim} / {r.n_flink}" for r in t.itertuples())
    parts = [f"{pattern}: runs simulated / on Flink per configuration: {runs}."]
    if (t[[f"n_{side}" for side in SIDES]].min(axis=1) < 2).any():
        parts.append("A side with one run has no spread, so a gap against it cannot be told from the "
                     "variation between runs: give the experiment reps=3.")
    for side, name in (("flink", "Flink"), ("sim", "simulated")):
        widest = max(((_relative_spread(r, m, side), r, m, dec, head) for _, r in t.iterrows()
                      for m, head, dec, _ in MEASURES), key=lambda x: -math.inf if math.isnan(x[0]) else x[0],
                     default=None)
        if widest is not None and math.isfinite(widest[0]) and widest[0] > 0:
            s, r, m, dec, head = widest
            parts.append(f"The {name} runs differ most in {head} of {r.config}: {_fmt(r[f'{m}_{side}_min'], dec)}–"
                         f"{_fmt(r[f'{m}_{side}_max'], dec)}, a range of {s:.0%} of their median.")
    within = [f"{r.config} {head}" for _, r in t.iterrows() for m, head, *_ in MEASURES if overlaps(r, m)]
    if within:
        parts.append("The two sides' ranges overlap, so the runs do not tell them apart, for: "
                     + ", ".join(within) + ".")
    return " ".join(parts)


def _fmt(v: float, decimals: int) -> str:
    return "–" if v is None or not math.isfinite(v) else f"{v:,.{decimals}f}"


def _gap(v: float, kind: str, decimals: int) -> str:
    if v is None or not math.isfinite(v):
        return "–"
    return f"{v:+.{decimals}f}" if kind == "diff" else f"×{v:.2f}"


def _cell(r: Any, m: str, side: str, decimals: int) -> str:
    """One side's median, with its range where its runs differ."""
    cell = _fmt(r[f"{m}_{side}"], decimals)
    low, high = r[f"{m}_{side}_min"], r[f"{m}_{side}_max"]
    if r[f"n_{side}"] > 1 and math.isfinite(low) and high > low:
        cell += f" ({_fmt(low, decimals)}–{_fmt(high, decimals)})"
    return cell


def table_rows(table: pd.DataFrame, pattern: str) -> Tuple[List[str], List[List[str]]]:
    heads = ["configuration", "runs sim / Flink"]
    for _, h, _, kind in MEASURES:
        heads += [f"{h} sim", f"{h} Flink", "gap (sim − Flink)" if kind == "diff" else "gap (sim / Flink)"]
    rows = []
    for _, r in table[table.pattern == pattern].iterrows():
        cells = [r.config, f"{r.n_sim} / {r.n_flink}"]
        for m, _, dec, kind in MEASURES:
            cells += [_cell(r, m, "sim", dec), _cell(r, m, "flink", dec), _gap(r[f"{m}_gap"], kind, dec)]
        rows.append(cells)
    return heads, rows


def sections(runs: pd.DataFrame) -> List[Any]:
    """The "Simulator vs Flink" section (one table per workload), or none when no configuration of
    the runs (pattern, config, run_dir) ran on both."""
    from reporting.report_document import Block, Section, Table

    if runs.empty:
        return []
    table = side_by_side(pairs(zip(runs.pattern, runs.config, runs.run_dir, strict=True)))
    if table.empty:
        return []
    blocks: List[Block] = [
        "Each configuration simulated and run on a real Flink in reactive mode, each side the median of "
        "its repetitions with their range (min–max) in brackets where they differ: one run on the engine "
        "is no measurement, it differs from the next by what else the machine ran, and a gap smaller than "
        "the spread is not one the runs measured. "
        "Times are the paper's: a Flink run's latencies and downtimes, measured in real time at a time "
        "compression f, are multiplied by f. Downtime = from the controller's action until the job runs "
        "at the new parallelism (the rescales table); the gap is sim − Flink for workers and rescales, "
        "sim / Flink for times, between the medians."]
    for pattern in dict.fromkeys(table.pattern):
        blocks.append(spread_text(table, pattern))
        heads, rows = table_rows(table, pattern)
        blocks.append(Table(f"{pattern}: simulator vs Flink (latency in paper-time ms, downtime in paper-time s)",
                            heads, rows))
    return [Section("Simulator vs Flink", blocks)]
