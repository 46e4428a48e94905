"""Simulator vs live: when a runs folder holds a configuration both simulated (`X`) and run on the
live testbed (`X-live`, docs/event-log.md; which run is which, its manifest says) on the same
pattern, their metrics side by side, with the gap and whether it is within target.

The live runs are the reference, the simulated ones the measurement: the simulated runs' mean is
compared with the live runs' median (one live run differs from the next by what else the machine
ran; the median is not pulled by one odd run), whose range is shown beside it. A gap is sim - live
in points for compliance, (sim - live) / live for counts and costs, sim / live for queue depth and latency,
the kinds and tolerances of the fidelity section (reporting.fidelity_gaps: 5 pp, 15 %, x1.3), so
"within target" means the same in both places. The metrics are the report's per-run metrics
(reporting.report_metrics, tables/run_metrics.csv); mean queue depth and end-to-end latency, which
the BTU metrics do not include, are read from the paired runs' event logs (`run_extras`) unless an
evaluation's metrics give them already.

    python -m reporting.live_gap RUNS_DIR [RUNS_DIR ...]   # the table, from the event logs (pandas)
"""
from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import pandas as pd

from reporting.fidelity_gaps import UNITS, kind_gap
from reporting.report_document import Block, Section, Table
from reporting.run_catalog import RunInfo
from testbed.arguments import flatten
from testbed.backend_registry import run_configuration
from testbed.eventlog import EventLog, Manifest
from testbed.fidelity_spec import CELL_KINDS
from testbed.policies.base import INITIAL_DEPLOYMENT
from testbed.runs_folder import NOT_SETTINGS

SIM, LIVE = "sim", "docker"  # the backends compared, as run manifests name them
# the policy's scale-ups and scale-downs after the initial deployment (the report's scale_ups count
# the deployment's too, which both sides share: a quiet run would match by them alone)
SCALING_ACTIONS = "scaling_actions"


@dataclass(frozen=True)
class GapMetric:
    metric: str  # a per-run metric (or SCALING_ACTIONS)
    label: str
    kind: str  # a key of testbed.fidelity_spec.CELL_KINDS
    decimals: int


METRICS: Tuple[GapMetric, ...] = (
    GapMetric("realtime_compliance_pct", "real-time compliance %", "points", 1),
    GapMetric("near_realtime_compliance_pct", "near real-time compliance %", "points", 1),
    GapMetric("relaxed_compliance_pct", "relaxed compliance %", "points", 1),
    GapMetric("paid_btus", "paid BTUs", "relative", 1),
    GapMetric(SCALING_ACTIONS, "scaling actions after the deployment (ups + downs)", "relative", 1),
    GapMetric("migrations", "migrations", "relative", 1),
    GapMetric("mean_instances", "mean instances", "relative", 2),
    GapMetric("mean_queue_depth", "mean queue depth", "ratio", 1),
    GapMetric("latency_ms", "mean end-to-end latency ms", "ratio", 0),
    GapMetric("latency_p95_ms", "p95 end-to-end latency ms", "ratio", 0),
)
EXTRA_METRICS = (SCALING_ACTIONS, "mean_queue_depth", "latency_ms", "latency_p95_ms")  # from the event logs
COLUMNS = ["pattern", "config", "metric", "label", "btu_minutes", "kind", "unit", "tolerance", "sim_mean",
           "n_sim", "live_median", "live_min", "live_max", "n_live", "gap", "normalised_gap", "within"]


@dataclass(frozen=True)
class GapRow:
    pattern: str
    config: str  # the simulated configuration X (the live one is X-live)
    metric: str
    label: str
    btu_minutes: Optional[int]  # the BTU length a cost is billed under; None: BTU-independent
    kind: str
    unit: str
    tolerance: float
    sim_mean: float
    n_sim: int
    live_median: float  # over the live runs: the reference
    live_min: float
    live_max: float
    n_live: int
    gap: float  # sim_mean against live_median, in the kind's unit (pp, %, x); NaN when not measurable
    normalised_gap: float  # |gap| / tolerance (1 = on the edge); NaN when not measurable
    within: Optional[bool]  # None when not measurable


@dataclass
class LiveGap:
    rows: List[GapRow] = field(default_factory=list)
    unpaired: List[Tuple[str, str]] = field(default_factory=list)  # (pattern, X-live) without a simulated X

    def frame(self) -> pd.DataFrame:
        frame = pd.DataFrame([asdict(r) for r in self.rows], columns=COLUMNS)
        frame["btu_minutes"] = pd.array(frame["btu_minutes"], dtype="Int64")
        return frame


RunKey = Tuple[str, str]  # (pattern, the run folder's configuration name)
Sides = Mapping[RunKey, Tuple[str, str]]  # -> (the configuration it ran, its backend)


def run_sides(manifests: Iterable[Manifest]) -> Dict[RunKey, Tuple[str, str]]:
    """What each run's manifest says it ran: the configuration (without the backend's part of the
    folder's name) and the backend."""
    return {(m.pattern, m.config): (run_configuration(m), m.backend) for m in manifests}


@dataclass(frozen=True)
class Pair:
    pattern: str
    config: str  # the configuration X
    sim: str  # the name of its simulated runs
    other: str  # the name of its runs on the other backend (live: X-live, Flink: X-flink)


def pair_configs(keys: Iterable[RunKey], sides: Sides, other: str = LIVE) -> Tuple[List[Pair], List[RunKey]]:
    """From (pattern, config) keys and what their manifests say (`run_sides`): the configurations run
    both simulated and on the backend `other` on a pattern, and the keys of `other`'s runs without a
    simulated twin, each in first-seen order. A key without a manifest is a simulated run of its name.
    The one pairing of simulated runs with their twins, for the live gap and the Flink comparison."""
    named = {(p, c): sides.get((p, c), (c, SIM)) for p, c in dict.fromkeys(keys)}
    simulated = {(p, base): c for (p, c), (base, backend) in named.items() if backend == SIM}
    paired: List[Pair] = []
    unpaired: List[RunKey] = []
    for (pattern, config), (base, backend) in named.items():
        if backend != other:
            continue
        if (pattern, base) in simulated:
            paired.append(Pair(pattern, base, simulated[(pattern, base)], config))
        else:
            unpaired.append((pattern, config))
    return paired, unpaired


@dataclass(frozen=True)
class LiveValues:
    """A metric over the live runs of a configuration: median and range of the runs that have it."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: pd.Series) -> "LiveValues":
        v = values.to_numpy(dtype=float)
        v = v[np.isfinite(v)]
        if not v.size:
            return cls(math.nan, math.nan, math.nan)
        return cls(float(np.median(v)), float(v.min()), float(v.max()))


def _gap(kind: str, live: float, sim: float) -> Tuple[float, float, Optional[bool]]:
    if not (math.isfinite(live) and math.isfinite(sim)):
        return math.nan, math.nan, None
    if sim == live:  # 0 = 0 counts as no gap (kind_gap cannot divide by a live 0)
        return (1.0 if kind == "ratio" else 0.0), 0.0, True
    gap, normalised = kind_gap(kind, live, sim)
    if not math.isfinite(normalised):
        return gap, math.nan, None
    return gap, normalised, bool(normalised <= 1.0)


def live_gap(per_run: pd.DataFrame, sides: Sides, metrics: Sequence[GapMetric] = METRICS) -> LiveGap:
    """The side-by-side table from per-run metrics in the report's long format (PER_RUN_COLUMNS of
    reporting.report_metrics: pattern, config, rep, btu_minutes, metric, value) and what the runs'
    manifests say (`run_sides`): per pattern, configuration X run simulated and live, metric and BTU
    length (costs of a re-billed configuration, one per BTU length),
    the simulated runs' mean, the live runs' median and range, the number of repetitions on each side,
    the gap (sim mean vs live median) and whether it is within target. Metrics neither side has are
    left out; a side without a value has NaN (not measurable)."""
    if per_run.empty:
        return LiveGap()
    paired, unpaired = pair_configs(zip(per_run["pattern"].astype(str), per_run["config"].astype(str),
                                        strict=True), sides)
    out = LiveGap(unpaired=unpaired)
    if not paired:
        return out
    frame = per_run
    btu = frame["btu_minutes"].astype("Float64")
    for pair in paired:
        pattern, base = pair.pattern, pair.config
        rows = frame[(frame["pattern"] == pattern) & frame["config"].isin([pair.sim, pair.other])]
        n_sim, n_live = (int(rows[rows["config"] == c]["rep"].nunique()) for c in (pair.sim, pair.other))
        for m in metrics:
            these = rows[rows["metric"] == m.metric]
            if these.empty or these["value"].isna().all():
                continue
            for b in dict.fromkeys(btu[these.index].fillna(-1).tolist()):
                one = these[btu[these.index].fillna(-1) == b]
                sim = float(one[one["config"] == pair.sim]["value"].astype(float).mean())
                live = LiveValues.of(one[one["config"] == pair.other]["value"].astype(float))
                gap, normalised, within = _gap(m.kind, live.median, sim)
                out.rows.append(GapRow(pattern, base, m.metric, m.label, None if b < 0 else int(b), m.kind,
                                       UNITS[m.kind], CELL_KINDS[m.kind], sim, n_sim, live.median, live.low,
                                       live.high, n_live, gap, normalised, within))
    return out


# ---- queue depth and latency from the event logs ------------------------------------------------

def run_extras(run_dir: Path) -> Dict[str, float]:
    """The policy's scaling actions after the initial deployment, mean queue depth (over the
    monitoring rows of all operators) and mean and p95 end-to-end latency of the sampled items, from
    one run's actions, queues and latency tables; NaN without them."""
    log = EventLog(run_dir)
    out = {name: math.nan for name in EXTRA_METRICS}
    if log.has("actions"):
        acts = log.read("actions")
        scaling = acts["action"].isin(["scale_up", "scale_down"]) & (acts["reason"] != INITIAL_DEPLOYMENT)
        out[SCALING_ACTIONS] = float(scaling.sum())
    if log.has("queues"):
        depth = log.read("queues")["depth"].to_numpy(dtype=float)
        if depth.size:
            out["mean_queue_depth"] = float(depth.mean())
    if log.has("latency"):
        lat = log.read("latency")["latency_ms"].to_numpy(dtype=float)
        lat = lat[np.isfinite(lat)]
        if lat.size:
            out["latency_ms"], out["latency_p95_ms"] = float(lat.mean()), float(np.quantile(lat, 0.95))
    return out


def add_extras(per_run: pd.DataFrame, run_dirs: Mapping[Tuple[str, str, int], Path], sides: Sides) -> pd.DataFrame:
    """per_run plus EXTRA_METRICS rows (run_extras) for the runs of paired configurations that do not
    have them; run_dirs maps (pattern, config, rep) to the run folder."""
    if per_run.empty:
        return per_run
    paired, _ = pair_configs(zip(per_run["pattern"].astype(str), per_run["config"].astype(str), strict=True),
                             sides)
    wanted = {(pair.pattern, c) for pair in paired for c in (pair.sim, pair.other)}
    have = set(zip(per_run["pattern"], per_run["config"], per_run["rep"], per_run["metric"], strict=True))
    rows = []
    for (pattern, config, rep), run_dir in run_dirs.items():
        if (pattern, config) not in wanted:
            continue
        missing = [m for m in EXTRA_METRICS if (pattern, config, rep, m) not in have]
        if not missing:
            continue
        first = per_run[(per_run["pattern"] == pattern) & (per_run["config"] == config)].iloc[0]
        extras = run_extras(Path(run_dir))
        rows += [{"pattern": pattern, "approach": first.get("approach", ""), "config": config,
                  "backend": first.get("backend", ""), "rep": rep, "btu_minutes": pd.NA, "metric": m,
                  "value": extras[m]} for m in missing]
    if not rows:
        return per_run
    extra = pd.DataFrame(rows).astype({"btu_minutes": "Int64"})
    return pd.concat([per_run, extra], ignore_index=True)


# ---- the report's section -----------------------------------------------------------------------

def _fmt(v: float, decimals: int) -> str:
    return "–" if v is None or not math.isfinite(v) else f"{v:,.{decimals}f}"


def _fmt_gap(row: GapRow) -> str:
    if not math.isfinite(row.gap):
        return "–"
    if row.kind == "ratio":
        return f"×{row.gap:.2f}"
    return f"{row.gap:+.1f} {row.unit}"


def _target(kind: str) -> str:
    return f"×{1 + CELL_KINDS[kind] / 100:.1f}" if kind == "ratio" else f"±{CELL_KINDS[kind]:g} {UNITS[kind]}"


def _within(row: GapRow) -> str:
    return "–" if row.within is None else ("yes" if row.within else "no")


def _live_cell(row: GapRow, decimals: int) -> str:
    """The live median, with the range of the live runs where there are several."""
    cell = f"{_fmt(row.live_median, decimals)} ({row.n_live})"
    if row.n_live > 1 and math.isfinite(row.live_min):
        cell += f", range {_fmt(row.live_min, decimals)}–{_fmt(row.live_max, decimals)}"
    return cell


def table_rows(gaps: LiveGap, pattern: str) -> Tuple[List[str], List[List[str]]]:
    heads = ["configuration", "metric", "sim mean (n)", "live median (n)", "gap (sim vs live)", "target", "within"]
    decimals = {m.metric: m.decimals for m in METRICS}
    rows = []
    for r in gaps.rows:
        if r.pattern != pattern:
            continue
        label = f"{r.label} ({r.btu_minutes}-min BTU)" if r.metric == "paid_btus" and r.btu_minutes else r.label
        d = decimals.get(r.metric, 2)
        rows.append([r.config, label, f"{_fmt(r.sim_mean, d)} ({r.n_sim})", _live_cell(r, d),
                     _fmt_gap(r), _target(r.kind), _within(r)])
    return heads, rows


def profiles(runs: Iterable[RunInfo], configs: Iterable[Tuple[str, str]]) -> List[str]:
    """The profiles (resolved_config.profile of their manifests) the simulated runs of `configs`
    (pattern, config) used."""
    wanted = set(configs)
    found = [str(r.manifest.resolved_config.get("profile") or "(none)") for r in runs
             if (r.pattern, r.config) in wanted]
    return list(dict.fromkeys(found))


# resolved-config keys expected to differ between a simulated and a live run of one configuration: the
# backend, seeds, and what says which runs go where rather than how they run (mix=true, which puts the
# simulated twin beside live runs of another profile, among them)
_SIDE_KEYS = ("backend.", "seed", *NOT_SETTINGS)


def config_differences(runs: Iterable[RunInfo], gaps: LiveGap) -> Dict[Tuple[str, str], List[str]]:
    """Per pair (pattern, X): the resolved-config keys on which X's first simulated run and its first
    live run differ, apart from the backend, seeds and the keys that only say which runs go where
    (output folder, repetitions, workers, mix) (e.g. a live run at another load_scale: its effective
    topology.tick_ms differs)."""
    first: Dict[Tuple[str, str, str], Dict[str, object]] = {}
    for r in runs:
        key = (r.pattern, run_configuration(r.manifest), r.manifest.backend)
        first.setdefault(key, flatten(r.manifest.resolved_config))
    out: Dict[Tuple[str, str], List[str]] = {}
    for pattern, base in dict.fromkeys((r.pattern, r.config) for r in gaps.rows):
        sim, live = first.get((pattern, base, SIM)), first.get((pattern, base, LIVE))
        if sim is None or live is None:
            continue
        keys = [k for k in sorted(set(sim) | set(live)) if sim.get(k) != live.get(k)
                and not any(k == side or (side.endswith(".") and k.startswith(side)) for side in _SIDE_KEYS)]
        if keys:
            out[(pattern, base)] = keys
    return out


def sections(gaps: LiveGap, sim_profiles: Sequence[str] = (),
             differences: Optional[Mapping[Tuple[str, str], Sequence[str]]] = None) -> List[Section]:
    """The "Simulator vs live" section (one table per pattern), or none when no configuration ran
    both simulated and live; `differences` (config_differences) are named under the tables: such a
    pair did not run the same settings, its gaps are not the simulator's alone."""
    if not gaps.rows:
        return []
    used = ", ".join(f"`{p}`" for p in sim_profiles) if sim_profiles else "the one in their manifests"
    blocks: List[Block] = [
        "Each configuration that ran both in the simulator (`X`) and on the live testbed (`X-live`: "
        "real operator containers, broker and VMs) on the same pattern: the simulated runs' mean and the "
        "live runs' median (n in brackets, and the live runs' range where there are several: one live run "
        f"differs from the next by what else the machine ran). The simulated runs used the profile {used}. "
        "The live runs are the reference: the gap is sim mean − live median in points for compliance, "
        "relative to live for BTUs, actions and instances, and "
        "sim / live for queue depth and latency, with the fidelity section's targets (5 pp, 15 %, ×1.3). "
        "A gap within target means the profile predicts the live testbed on that metric; – marks a "
        "metric one side does not have (or a relative gap against a live 0)."]
    for pattern in dict.fromkeys(r.pattern for r in gaps.rows):
        heads, rows = table_rows(gaps, pattern)
        blocks.append(Table(f"{pattern}: simulator vs live", heads, rows))
    for (pattern, base), keys in (differences or {}).items():
        blocks.append(f"{pattern}/{base} ran with different settings simulated and live, so its gaps are not "
                      f"the simulator's alone: {', '.join(f'`{k}`' for k in keys)}.")
    if gaps.unpaired:
        blocks.append("Live configurations without a simulated twin in this folder: "
                      + ", ".join(f"{p}/{c}" for p, c in gaps.unpaired) + ".")
    return [Section("Simulator vs live", blocks)]


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`python -m reporting.live_gap RUNS_DIR [RUNS_DIR ...]`: the table from the runs' event logs (pandas,
    no Spark). Several folders pool their runs: the repetitions of a configuration are numbered across
    them (each folder numbers its own from 1)."""
    from reporting.metrics import long_rows, run_metrics
    from testbed.eventlog import find_runs, read_manifest

    args = list(sys.argv[1:] if argv is None else argv)
    if not args or any("=" in a for a in args):
        print("usage: python -m reporting.live_gap RUNS_DIR [RUNS_DIR ...]", file=sys.stderr)
        return 2
    rows, dirs, manifests = [], {}, []
    reps: Dict[Tuple[str, str], int] = {}
    for run_dir in (d for folder in args for d in find_runs(folder)):
        m = read_manifest(run_dir)
        if m.status != "complete":
            continue
        reps[(m.pattern, m.config)] = rep = reps.get((m.pattern, m.config), 0) + 1
        values = run_metrics(run_dir)
        independent = [k for k in values if k != "by_btu" and not isinstance(values[k], dict)]
        rows += [{**r, "rep": rep} for r in long_rows(m, values, Path(run_dir), independent=independent)]
        dirs[(m.pattern, m.config, rep)] = Path(run_dir)
        manifests.append(m)
    per_run = pd.DataFrame(rows)
    if not per_run.empty:
        per_run["btu_minutes"] = pd.array(per_run["btu_minutes"], dtype="Int64")
    sides = run_sides(manifests)
    gaps = live_gap(add_extras(per_run, dirs, sides), sides)
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.max_rows", 500):
        print(gaps.frame().drop(columns=["label", "unit", "tolerance"]).to_string(index=False) if gaps.rows
              else "no configuration ran both simulated and live")
    for pattern, config in gaps.unpaired:
        print(f"unpaired: {pattern}/{config} has no simulated twin")
    return 0


if __name__ == "__main__":
    sys.exit(main())
