"""The summary of a runs folder (pandas): the mean and sd over repetitions of each configuration's
metrics (reporting.metrics) with its evaluation's own (reporting.evaluations), and the readable
table of `testbed summary`.

Output (`summarise`) is the long format of experiments/reference/paper_btu_results.csv:
pattern, approach, btu_minutes, metric, mean, sd, followed by n (values averaged), config (the run
folders' name) and backend (what the runs' manifests say ran them).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Hashable, List, Optional, Sequence, Tuple

import pandas as pd

from reporting.evaluations import evaluation_metrics, metric_order, report_for
from reporting.metrics import (
    BTU_DEPENDENT_METRICS,
    BTU_INDEPENDENT_METRICS,
    COLUMNS,
    LONG_KEYS,
    METRICS,
    PathLike,
    SummaryError,
    SummaryInputError,
    configurations,
    long_rows,
    rebilled,
    run_metrics,
)
from reporting.run_catalog import EXIT_BAD_INPUT, EXIT_DAMAGED, EXIT_FAILED, EXIT_OK, DamagedRun
from testbed.eventlog import EventLogError, Manifest, find_runs, read_manifest

# ---- many runs --------------------------------------------------------------------------------

def _runs(runs_root: PathLike, damaged: Optional[List[DamagedRun]] = None) -> List[Tuple[Path, Manifest]]:
    """The run folders and their manifests; an unreadable manifest raises EventLogError, or with a
    `damaged` list is added to it."""
    root = Path(runs_root)
    if not root.is_dir():
        raise SummaryInputError(f"runs folder not found: {root}")
    dirs = find_runs(root)
    if not dirs:
        raise SummaryInputError(f"no runs (folders with manifest.json) below {root}")
    runs = []
    for d in dirs:
        try:
            runs.append((d, read_manifest(d)))
        except EventLogError as exc:
            if damaged is None:
                raise
            damaged.append(DamagedRun(d, str(exc)))
    return runs


def incomplete_runs(runs_root: PathLike) -> pd.DataFrame:
    """Runs left out of the summary because their status is not "complete"."""
    rows = [{"run_dir": str(d), "pattern": m.pattern, "config": m.config, "rep": m.rep,
             "status": m.status, "error": m.error}
            for d, m in _runs(runs_root, []) if m.status != "complete"]
    return pd.DataFrame(rows, columns=["run_dir", "pattern", "config", "rep", "status", "error"])


def _metric_rank(metric: str) -> Tuple[int, int]:
    """The platform's metrics in METRICS order, then an evaluation's own (reporting.evaluations)."""
    if metric in METRICS:
        return (0, METRICS.index(metric))
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


def _run_rows(run_dir: Path, manifest: Manifest) -> List[Dict[str, Any]]:
    """The long rows of one run's metrics, the platform's and its evaluation's own (e.g. PRESPS's)."""
    values = run_metrics(run_dir)
    extra = evaluation_metrics(run_dir, manifest)
    values.update(extra)
    return long_rows(manifest, values, run_dir, independent=[*BTU_INDEPENDENT_METRICS, *extra])


def summarise(runs_root: PathLike, skip_damaged: bool = False) -> pd.DataFrame:
    """Mean and sample sd (ddof=1) over the repetitions of each configuration (pattern, config).

    Only complete runs count; the others are listed in `.attrs["incomplete_runs"]` (paths) and by
    `incomplete_runs()`. NaN values (e.g. no adaptation episode) are left out of mean and sd; `n`
    is the number of values used. A run whose manifest, tables or config cannot be read raises
    (SummaryError, EventLogError) naming it, or with `skip_damaged` is left out as the report leaves
    it out, listed in `.attrs["damaged_runs"]` (reporting.run_catalog.DamagedRun)."""
    damaged: List[DamagedRun] = []
    runs = _runs(runs_root, damaged if skip_damaged else None)
    complete = [(d, m) for d, m in runs if m.status == "complete"]
    experiments = sorted({m.experiment for _, m in complete})
    if len(experiments) > 1:
        raise SummaryError(f"{runs_root}: runs of several experiments {experiments}; summarise one experiment folder")
    rows: List[Dict[str, Any]] = []
    for run_dir, manifest in complete:
        try:
            rows.extend(_run_rows(run_dir, manifest))
        except (SummaryError, EventLogError) as exc:
            if not skip_damaged:
                raise
            damaged.append(DamagedRun(run_dir, str(exc), manifest))
    out = mean_sd(pd.DataFrame(rows))
    out.attrs["incomplete_runs"] = [str(d) for d, m in runs if m.status != "complete"]
    out.attrs["damaged_runs"] = damaged
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
    for a, c, b, m, mean, sd in zip(df["approach"], config, btu, df["metric"], df["mean"], df["sd"], strict=True):
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
    columns = _TABLE_COLUMNS
    if df.attrs.get("evaluation"):  # an evaluation may print its own metrics (e.g. PRESPS's Table 3)
        columns = report_for(df.attrs["evaluation"]).summary_columns or _TABLE_COLUMNS
    blocks = []
    for pattern in sorted(df["pattern"].astype(str).unique()):
        rows = _table_rows(df[df["pattern"].astype(str) == pattern], columns)
        header = ["config"] + [h for h, _, _ in columns]
        lines = [[label] + [_cell(*cells[m], d) for _, m, d in columns] for _, label, cells in rows]
        widths = [max(len(r[i]) for r in [header, *lines]) for i in range(len(header))]

        def fmt(r: Sequence[str], widths: List[int] = widths) -> str:
            return "  ".join([r[0].ljust(widths[0])] + [v.rjust(w) for v, w in zip(r[1:], widths[1:], strict=True)])

        blocks.append("\n".join([f"pattern: {pattern}", fmt(header), "-" * len(fmt(header))] + [fmt(r) for r in lines]))
    return "\n\n".join(blocks) + "\n" if blocks else "(no complete runs)\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`testbed summary RUNS_DIR`: print the table, write RUNS_DIR/summary.csv. Exit statuses as the
    report's: 0, 3 when damaged runs were left out (each named on stderr), 2 on a bad argument (no
    runs folder, no runs in it, every complete run damaged), 1 when the runs cannot be summarised."""
    parser = argparse.ArgumentParser(prog="testbed summary", description=__doc__.splitlines()[0])
    parser.add_argument("runs_dir", type=Path, help="folder of run folders (e.g. runs/<experiment>)")
    args = parser.parse_args(argv)
    try:
        df = summarise(args.runs_dir, skip_damaged=True)
    except SummaryInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except SummaryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    damaged: List[DamagedRun] = df.attrs["damaged_runs"]
    if damaged and df.empty:
        first = damaged[0]
        print(f"error: no run below {args.runs_dir} can be summarised ({len(damaged)} damaged): {first.run_dir}: "
              f"{first.reason}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(format_summary(df), end="")
    for run in df.attrs["incomplete_runs"]:
        print(f"not complete, left out: {run}")
    for bad in damaged:
        print(f"damaged, left out of the summary: {bad.run_dir}: {bad.reason}", file=sys.stderr)
    out = args.runs_dir / "summary.csv"
    df.to_csv(out, index=False)
    print(f"wrote {out}")
    return EXIT_DAMAGED if damaged else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
