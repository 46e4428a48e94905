"""Simulator vs Flink: when a runs folder holds a configuration both simulated (`daedalus`) and run on
a real Flink (`daedalus-flink`) on the same workload, their figures side by side, with the gap.

A Flink run compresses the paper's time by f (`time_compression` in its manifest): its durations
(latency, rescale downtimes) are real ones, f times shorter than the paper time the simulator runs
in. Both columns are given in the paper's time: the engine's ms and s x f. Workers and rescale
counts need no scaling (a time-average and a count)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, Iterable, List, Tuple

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


def side_by_side(per_run: pd.DataFrame) -> pd.DataFrame:
    """Per pattern and configuration: n runs per side, then <measure>_sim (the simulated runs' mean),
    <measure>_flink (the Flink runs' median: one Flink run differs from the next by what else the
    machine ran, and the median is not pulled by one odd run), <measure>_flink_min and _flink_max
    (their range) and <measure>_gap (sim - Flink for workers and rescales, sim / Flink for latencies
    and downtimes, against the median)."""
    cols = ["pattern", "config", "n_sim", "n_flink"] + [f"{m}_{side}" for m, *_ in MEASURES
                                                        for side in ("sim", "flink", "flink_min", "flink_max", "gap")]
    if per_run.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for (p, c), g in per_run.groupby(["pattern", "config"], sort=False):
        sim, fl = g[g.side == "sim"], g[g.side == "flink"]
        row: Dict[str, Any] = {"pattern": p, "config": c, "n_sim": len(sim), "n_flink": len(fl)}
        for m, _, _, gap in MEASURES:
            a = float(sim[m].mean())  # NaN of an empty side or no value
            spread = LiveValues.of(fl[m])  # median and range of the runs that have the value
            b, low, high = spread.median, spread.low, spread.high
            row.update({f"{m}_sim": a, f"{m}_flink": b, f"{m}_flink_min": low, f"{m}_flink_max": high})
            row[f"{m}_gap"] = a - b if gap == "diff" else (a / b if b else math.nan)
        rows.append(row)
    return pd.DataFrame(rows, columns=cols)


def _fmt(v: float, decimals: int) -> str:
    return "–" if v is None or not math.isfinite(v) else f"{v:,.{decimals}f}"


def _gap(v: float, kind: str, decimals: int) -> str:
    if v is None or not math.isfinite(v):
        return "–"
    return f"{v:+.{decimals}f}" if kind == "diff" else f"×{v:.2f}"


def _flink_cell(r: Any, m: str, decimals: int) -> str:
    """The Flink runs' median, with their range where there are several."""
    cell = _fmt(r[f"{m}_flink"], decimals)
    low, high = r[f"{m}_flink_min"], r[f"{m}_flink_max"]
    if r.n_flink > 1 and math.isfinite(low) and high > low:
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
            cells += [_fmt(r[f"{m}_sim"], dec), _flink_cell(r, m, dec), _gap(r[f"{m}_gap"], kind, dec)]
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
        "Each configuration simulated (mean over repetitions) and run on a real Flink in reactive mode "
        "(median over the Flink runs, their range in brackets where there are several: one run on the "
        "engine is no measurement, it differs from the next by what else the machine ran). "
        "Times are the paper's: a Flink run's latencies and downtimes, measured in real time at a time "
        "compression f, are multiplied by f. Downtime = from the controller's action until the job runs "
        "at the new parallelism (the rescales table); the gap is sim − Flink for workers and rescales, "
        "sim / Flink for times."]
    for pattern in dict.fromkeys(table.pattern):
        heads, rows = table_rows(table, pattern)
        blocks.append(Table(f"{pattern}: simulator vs Flink (latency in paper-time ms, downtime in paper-time s)",
                            heads, rows))
    return [Section("Simulator vs Flink", blocks)]
