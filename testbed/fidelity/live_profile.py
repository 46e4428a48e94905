"""A simulator profile measured on the live testbed (`testbed live-profile RUNS name=NAME`): the live
runs of a runs folder (configurations named `<configuration>-live`, testbed/live/) give the
simulator's unknowns values measured from their event log, not assumed:

* **service time** per operator (`topology.operators.<op>.service.mean_ms`): busy wall time less
  run-queue delay (`instance_cpu.busy_ms - run_delay_ms`: the time the worker slots were occupied,
  less the time their threads and the processes they ran waited for a CPU inside those busy
  periods), over the items processed, summed over the instances and every interval with work. It
  holds the operators' waits for Redis and the broker (most of O2's and O6's time, which CPU time
  leaves out) but no wait for a CPU, so it does not depend on what else the machine ran, and
  `backend.shared_cores` adds the slowdown of a crowded machine in the simulator. CPU time per item
  (`cpu_ms`) is reported beside it. Runs without the delay fall back to CPU time, runs without
  either (recorded before they existed) to busy wall time (`instance_stats`: utilisation x interval x
  parallel slots) over the intervals whose busy slots stay within the shared cores (beyond, a slot
  counts its wait for the CPU as busy), with a warning in the header;
  `service.cv` from consecutive intervals' means: a mean of n items varies with
  sd sigma / sqrt(n), so (s_i - s_j)^2 / (1/n_i + 1/n_j) estimates sigma^2, its median over 0.4549
  (a chi-square(1)'s median) unmoved by the few pairs across a load step. Not from `samples`: their
  durations hold the hop and, under `seconds_truncated`, up to a second of truncation, far more than
  most operators' work;
* **wait for a CPU** per operator (`service.wait_ms`): the run-queue delay per item over the
  intervals whose busy slots stay within the shared cores, the wait a woken worker pays even on a
  machine with cores to spare (busy less delay only, not with the CPU or busy wall clocks);
* **emission** of the incident filters (O2, O6: `emission.items_per_incident`): items into the
  operator / items out of it (`edges`); the other operators' output ratios in the header;
* **hop latency** (`backend.hop_latency_ms`): sampled durations (upstream send -> end of processing)
  in intervals where the operator's queue was empty at both ends, less its busy wall time per item,
  at the operators fed by operators only (a source's tick arrives at once and queues behind itself);
  the median, or under `seconds_truncated` (the send time cut to whole seconds adds U(0, 1 s)) the
  mean less 500 ms;
* **container start** (`infrastructure.container_start_s`): `docker run` -> running of the instances
  started during the run (the manifest's instance records); the request -> first report in
  `instance_stats` in the header (monitoring resolution, host boot and emulated pull included);
* **lease delay** (`infrastructure.lease_delay_s`): lease (`leases`) -> ready (`hosts`), the n-th
  lease matched to the n-th host ready, at the monitoring interval's midpoint (+- half of it);
* **shared cores** (`backend.shared_cores`): the cores the run's logical hosts shared (argument, the
  engine's recorded CPU count, or this machine's), and the busy cores measured per interval; per
  run in the header, the cores its other load left and the other processes' runnable threads
  (`competing_threads`), the values that simulate a run under that load;
* the runtime settings the simulator must share (`runtime.*`, parallel slots): copied.

A value with too few observations is left out (the base profile's stays) and the header says so."""
from __future__ import annotations

import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd

from testbed.arguments import ConfigError
from testbed.backend_registry import run_configuration
from testbed.config import validate_cores
from testbed.eventlog import EventLog, EventLogError, Manifest, billing_mode, read_manifest
from testbed.fidelity.measured_runs import complete_runs, spread
from testbed.fidelity.profile_file import target_argument

LIVE = "docker"  # the backend whose runs are measured, as manifests name it
INCIDENT_OPERATORS = ("O2", "O6")  # the live filters that emit on a new incident only
MIN_INTERVALS = 3  # intervals with work for a service mean
MIN_CV_INTERVALS = 5  # ... for its cv
MIN_HOPS = 10  # quiet samples for the hop latency
MIN_STARTS = 2  # container starts / leases for a range
QUIET_DEPTH = 0  # queue depth at both ends of an interval for its samples to count as unqueued
CHI2_1_MEDIAN = 0.4549  # median of a chi-square with one degree of freedom
TRUNCATION_MEAN_MS = 500.0  # mean of U(0, 1 s): what seconds_truncated adds to a duration
RUNTIME_KEYS = ("measurement", "sampling", "sample_every", "initial_instances")
TABLES = ("instance_stats", "edges", "samples", "queues", "hosts", "leases", "placements")
CPU_TABLE = "instance_cpu"  # live runs recorded before CPU time lack it
# the clocks a service time can be read from, best first: busy less run-queue delay, CPU, busy wall
SERVICE, CPU, BUSY = "service_ms", "cpu_ms", "busy_ms"
USAGE = "usage: testbed live-profile RUNS_DIR [RUNS_DIR ...] name=NAME [out=FILE.yaml] [cores=N] [force=true]"


class ProfileError(ValueError):
    """Input a profile cannot be measured from (one line, for the user)."""


@dataclass
class RunInfo:
    name: str
    pattern: str
    duration_s: float
    scale: Any
    instances: int  # instances the run started
    hosts: int  # hosts it leased
    measurement: str
    profile: str = ""  # the profile the live run was configured with
    twin: str = ""  # the overrides that simulate the same configuration beside it (twin_command)


@dataclass
class Service:
    operator: str
    mean_ms: float  # NaN: no interval with work
    cv: float  # NaN: too few intervals
    intervals: int
    items: int
    capped: int  # intervals with an instance at utilisation 1 (its busy time cut)
    per_interval_ms: np.ndarray
    spread_cv: float = math.nan  # from the spread around the overall mean: load changes included
    pairs: int = 0  # consecutive interval pairs behind cv
    all_mean_ms: float = math.nan  # over every interval with work, contended ones included
    all_intervals: int = 0
    uncontended: bool = True  # the wall-time mean from the intervals within the shared cores only
    wall_mean_ms: float = math.nan  # busy wall time per item (the mean_ms of the busy clock)
    wall_intervals: int = 0  # intervals behind wall_mean_ms
    clock: str = BUSY  # what mean_ms and cv are read from: SERVICE, CPU or BUSY
    cpu_mean_ms: float = math.nan  # CPU time per item over every interval with work (NaN: not recorded)
    delay_mean_ms: float = math.nan  # run-queue delay per item over the same (NaN: not recorded)
    wait_ms: float = math.nan  # run-queue delay per item within the shared cores (service.wait_ms)


@dataclass
class Emission:
    operator: str
    items_in: int
    items_out: int
    structural: float  # the topology's ratio_out / ratio_in
    configured_per_incident: float = math.nan  # the run's emission.items_per_incident (the payload model's)
    processed: int = 0  # of items_in, those processed (instance_stats): a backlog at the end emitted nothing

    @property
    def out_per_in(self) -> float:
        return self.items_out / self.processed if self.processed else math.nan

    @property
    def in_per_out(self) -> float:
        return self.processed / self.items_out if self.items_out else math.nan


@dataclass
class Measured:
    """What the live runs of a folder measured."""

    root: str
    runs: List[RunInfo]
    service: Dict[str, Service]
    emission: Dict[str, Emission]
    hop_by_operator: Dict[str, np.ndarray]  # per quiet sample: duration - service (truncation not yet removed)
    source_fed: List[str]  # operators a source feeds: their quiet samples still queue behind a tick's burst
    measurement: str  # runtime.measurement of the runs
    container_start_s: np.ndarray  # docker run -> running, instances started during the runs
    start_latency_s: np.ndarray  # request -> running of the same (host boot and emulated pull included)
    request_to_report_s: np.ndarray  # scale-up request -> first instance_stats row (monitoring resolution)
    lease_delay_s: np.ndarray  # lease -> ready, interval midpoints
    monitoring_s: float
    busy_cores: np.ndarray  # per interval: the busy worker slots of all instances
    copied: Dict[str, Any]  # runtime.* and parallel, from the resolved config
    cores: float = 0.0
    cores_source: str = ""
    configured: Dict[str, Any] = field(default_factory=dict)  # the live runs' infrastructure settings
    without_cpu: List[str] = field(default_factory=list)  # runs without CPU time: service from busy wall time
    machine_load: Dict[str, Any] = field(default_factory=dict)  # per run: the manifest's machine_load
    without_delay: List[str] = field(default_factory=list)  # runs without run-queue delay
    per_run: Dict[str, Dict[str, Any]] = field(default_factory=dict)  # per run alone: profile_values
    competing: Dict[str, float] = field(default_factory=dict)  # per run: competing_threads

    @property
    def clock(self) -> str:
        return service_clock(self.without_cpu, self.without_delay)

    @property
    def hop_ms(self) -> np.ndarray:
        """The quiet samples of the operators fed by operators only."""
        parts = [v for op, v in self.hop_by_operator.items() if op not in self.source_fed]
        return np.concatenate(parts) if parts else np.array([])

    def hop_estimate(self, values: np.ndarray) -> float:
        """The hop: the median, or under seconds_truncated the mean less the truncation's mean (the
        median of a sum with a uniform is not the median plus 500)."""
        if values.size < MIN_HOPS:
            return math.nan
        if self.measurement == "seconds_truncated":
            return float(np.mean(values)) - TRUNCATION_MEAN_MS
        return float(np.median(values))

    @property
    def hop_latency_ms(self) -> float:
        return self.hop_estimate(self.hop_ms)


def live_runs(root: Path) -> List[Path]:
    """The complete runs below root that ran live (their manifests name the backend `docker`)."""
    return complete_runs(root, LIVE)


def _cfg(m: Manifest, *path: str, default: Any = None) -> Any:
    node: Any = m.resolved_config
    for p in path:
        if not isinstance(node, dict) or p not in node:
            return default
        node = node[p]
    return node


def _parallel(m: Manifest) -> int:
    """Worker slots per instance: the live runtime's `backend.live.parallel` (utilisation's denominator)."""
    return int(_cfg(m, "backend", "live", "parallel", default=1) or 1)


def service_clock(without_cpu: Sequence[str], without_delay: Sequence[str]) -> str:
    """The one clock pooled runs are read on: the best every run recorded."""
    return BUSY if without_cpu else CPU if without_delay else SERVICE


def service_per_interval(stats: pd.DataFrame, step_s: float, parallel: int, run: str = "",
                         cpu: Optional[pd.DataFrame] = None) -> pd.DataFrame:
    """Per operator and interval with work, over all instances: items, busy ms (`instance_stats`,
    capped at the interval), CPU ms and service ms (`instance_cpu`: uncapped busy ms less the run-queue
    delay in busy periods; NaN where an instance did not report it, or the run has no such table)."""
    busy = stats.groupby("t_s").utilisation.sum() * parallel
    s = stats[stats.processed > 0].copy()
    s["run"] = run
    s["busy_cores"] = s.t_s.map(busy)
    s["busy_ms"] = s.utilisation * step_s * 1000.0 * parallel
    s["capped"] = s.utilisation >= 1.0
    if cpu is None:
        s["cpu_ms"] = s["run_delay_ms"] = s["service_ms"] = math.nan
    else:
        c = cpu[["t_s", "instance", "busy_ms", "cpu_ms", "run_delay_ms"]].rename(columns={"busy_ms": "cpu_busy_ms"})
        s = s.merge(c, on=["t_s", "instance"], how="left")
        s["service_ms"] = s.cpu_busy_ms - s.run_delay_ms
    s["cpu_known"] = s.cpu_ms.notna()
    s["delay_known"] = s.service_ms.notna()
    return s.groupby(["run", "operator", "t_s"], as_index=False).agg(
        items=("processed", "sum"), busy_ms=("busy_ms", "sum"), cpu_ms=("cpu_ms", "sum"),
        run_delay_ms=("run_delay_ms", "sum"), service_ms=("service_ms", "sum"), cpu_known=("cpu_known", "all"),
        delay_known=("delay_known", "all"), capped=("capped", "any"), busy_cores=("busy_cores", "first"))


def successive_z2(rows: pd.DataFrame, step_s: float, clock: str = BUSY) -> np.ndarray:
    """Per pair of consecutive intervals with work: (s_i - s_j)^2 / (1/n_i + 1/n_j), whose expectation
    is the per-item variance when both means come from the same distribution. Differencing neighbours
    cancels the load's slow changes (the steps of a pattern) that the spread around one mean keeps."""
    out = []
    for _, g in rows.groupby("run"):
        g = g.sort_values("t_s")
        n = g["items"].to_numpy(dtype=float)
        s = g[clock].to_numpy(dtype=float) / n
        near = np.diff(g.t_s.to_numpy(dtype=float)) <= 1.5 * step_s
        out.append(((s[1:] - s[:-1]) ** 2 / (1 / n[1:] + 1 / n[:-1]))[near])
    return np.concatenate(out) if out else np.array([])


def _per_item(rows: pd.DataFrame, clock: str) -> float:
    n = rows["items"].to_numpy(dtype=float)
    return float(rows[clock].sum() / n.sum()) if n.size >= MIN_INTERVALS and n.sum() > 0 else math.nan


def _service(op: str, rows: pd.DataFrame, step_s: float, cores: float, clock: str = BUSY) -> Service:
    """Mean and cv of the clock's time per item. Busy less run-queue delay, and CPU time: over every
    interval with work (neither holds a wait for a CPU). Busy wall time: over the uncontended
    intervals (busy slots of all instances within the shared cores: the simulator's CPU sharing slows
    nothing there and adds its own slowdown beyond), or over all intervals where fewer than
    MIN_INTERVALS are uncontended. CPU time and delay per item beside it where every interval has them."""
    every = rows
    all_mean = float(every.busy_ms.sum() / every["items"].sum()) if len(every) else math.nan
    calm = rows[rows.busy_cores <= cores]
    uncontended = len(calm) >= MIN_INTERVALS
    wall_rows = calm if uncontended else rows
    wall = _per_item(wall_rows, BUSY)
    rows = wall_rows if clock == BUSY else every
    n = rows["items"].to_numpy(dtype=float)
    work = rows[clock].to_numpy(dtype=float)
    per = work / n if n.size else np.array([])
    mean = _per_item(rows, clock)
    cv = spread_cv = math.nan
    z2 = successive_z2(rows, step_s, clock)
    if z2.size >= MIN_CV_INTERVALS and mean > 0:
        # the median of a chi-square(1) is 0.4549 x its mean: robust to the few pairs across a load step
        cv = math.sqrt(float(np.median(z2)) / CHI2_1_MEDIAN) / mean
        spread_cv = math.sqrt(float(np.mean(n * (per - mean) ** 2))) / mean
    cpu_mean = _per_item(every, CPU) if len(every) and every.cpu_known.all() else math.nan
    delay_mean = _per_item(every, "run_delay_ms") if len(every) and every.delay_known.all() else math.nan
    wait = _per_item(calm, "run_delay_ms") if clock == SERVICE and uncontended else math.nan
    return Service(op, mean, cv, int(n.size), int(n.sum()), int(rows.capped.sum()), per, spread_cv, int(z2.size),
                   all_mean, len(every), uncontended, wall, len(wall_rows), clock, cpu_mean, delay_mean, wait)


def _emissions(edges: pd.DataFrame, processed: pd.Series, operators: Dict[str, Any]) -> Dict[str, Emission]:
    into = edges.groupby("target")["items"].sum()
    out = edges.groupby("source")["items"].sum()
    res = {}
    for op, spec in operators.items():
        structural = float(spec.get("ratio_out", 1)) / float(spec.get("ratio_in", 1)) if spec.get("downstream") else 0.0
        per_incident = float((spec.get("emission") or {}).get("items_per_incident", math.nan) or math.nan)
        res[op] = Emission(op, int(into.get(op, 0)), int(out.get(op, 0)), structural, per_incident,
                           int(processed.get(op, 0)))
    return res


def quiet_hops(samples: pd.DataFrame, queues: pd.DataFrame, service_ms: Dict[str, float]) -> Dict[str, np.ndarray]:
    """Per operator: duration - service of the samples finished in an interval whose operator queue
    was empty at its start and its end: nothing waited, so the rest is the hop (send -> processing)."""
    out: Dict[str, np.ndarray] = {}
    for op, q in queues.groupby("operator"):
        if not math.isfinite(service_ms.get(str(op), math.nan)):
            continue
        q = q.sort_values("t_s")
        t, depth = q.t_s.to_numpy(dtype=float), q.depth.to_numpy()
        quiet = np.concatenate([[False], (depth[1:] <= QUIET_DEPTH) & (depth[:-1] <= QUIET_DEPTH)])
        s = samples[samples.operator == op]
        k = np.searchsorted(t, s.t_s.to_numpy(dtype=float), side="left")  # the interval each sample ends in
        inside = k < t.size
        sel = np.zeros(len(s), dtype=bool)
        sel[inside] = quiet[k[inside]]
        out[str(op)] = s.duration_ms.to_numpy(dtype=float)[sel] - service_ms[str(op)]
    return out


def source_fed(edges: pd.DataFrame, operators: Sequence[str]) -> List[str]:
    """Operators with an edge from a source (not an operator): a tick delivers its items at once."""
    return sorted(set(edges[~edges.source.isin(list(operators))].target))


def _starts(m: Manifest, span: str = "container_start_s") -> np.ndarray:
    """A span of the instances requested during the run (not the initial deployment) from the pool's
    records: `container_start_s` (docker run -> running) or `start_latency_s` (request -> running)."""
    recs = m.details.get("instances", []) if isinstance(m.details, dict) else []
    return np.array([float(r[span]) for r in recs
                     if r.get(span) is not None and float(r.get("requested_at") or 0.0) > 0.0])


def _request_to_report(placements: pd.DataFrame, stats: pd.DataFrame) -> np.ndarray:
    first = stats.groupby("instance").t_s.min()
    ups = placements[(placements.action == "scale_up") & (placements.t_s > 0)]
    return np.array([float(first[i]) - float(t) for t, i in zip(ups.t_s, ups.instance, strict=True)
                     if i in first.index and first[i] >= t])


def lease_delays(leases: pd.DataFrame, hosts: pd.DataFrame, step_s: float) -> np.ndarray:
    """Lease -> ready per host leased during the run: hosts ready so far (ready now + released) matched
    in lease order; the ready time is the midpoint of the interval the count rose in."""
    leases = leases.sort_values("start_s")
    hosts = hosts.sort_values("t_s")
    initial = int((leases.start_s <= 0).sum())
    later = leases[leases.start_s > 0]
    released_ends = np.sort(leases[leases.released].end_s.to_numpy(dtype=float))
    t = hosts.t_s.to_numpy(dtype=float)
    ever = hosts.ready.to_numpy() + np.searchsorted(released_ends, t, side="right")
    delays = []
    for k, start in enumerate(later.start_s.to_numpy(dtype=float)):
        hit = np.nonzero(ever >= initial + k + 1)[0]
        if hit.size and t[hit[0]] > start:
            delays.append(max(0.0, t[hit[0]] - step_s / 2 - start))
    return np.array(delays)


def competing_threads(rows: pd.DataFrame, load: Dict[str, Any]) -> float:
    """Other processes' runnable threads during a run (backend.competing_threads): the scheduler
    shares the cores among all runnable threads, so each of them got the share of a core that the
    run's CPU-bound operator got while runnable (CPU time over CPU time and run-queue delay, of the
    operator with the most CPU time; a short worker's share is its wake-up wait instead), and the
    other load's cores over that share counts them. NaN without the other load or the delay."""
    other = (load.get("other_cores") or {}).get("mean") if isinstance(load, dict) else None
    if not isinstance(other, (int, float)) or rows.empty or not rows.delay_known.all():
        return math.nan
    per_op = rows.groupby("operator")[["cpu_ms", "run_delay_ms"]].sum()
    top = per_op.loc[per_op.cpu_ms.idxmax()]
    runnable = float(top.cpu_ms + top.run_delay_ms)
    return float(other) * runnable / float(top.cpu_ms) if top.cpu_ms > 0 else math.nan


def _busy_cores(stats: pd.DataFrame, parallel: int) -> np.ndarray:
    return (stats.groupby("t_s").utilisation.sum() * parallel).to_numpy(dtype=float)


def twin_command(m: Manifest, out: Path) -> str:
    """The overrides that simulate a live run's configuration on its pattern, duration and effective
    tick into its runs folder: a configuration made by `policy=` alone (no parameters of its own) by
    that policy, another by its evaluation's `evaluation.only`."""
    base = run_configuration(m)
    confs = _cfg(m, "evaluation", "configurations", default=[]) or [{}]
    conf = confs[0] if isinstance(confs[0], dict) else {}
    own = billing_mode(m) == "own"
    plain = not any(conf.get(k) for k in ("params", "placement", "placement_params", "runtime"))
    if plain and base == (f"{m.policy}-{m.btu_minutes}" if own else m.policy):
        pick = f"policy={m.policy}" + (f" billing.btu_minutes={m.btu_minutes}" if own else "")
    else:
        pick = f"evaluation={m.experiment} evaluation.only=[{base}]"
    keys = [f"pattern={m.pattern}", pick, "backend=sim"]
    for key, path in (("duration_min", ("duration_min",)), ("topology.tick_ms", ("topology", "tick_ms")),
                      ("seed", ("seed",))):
        value = _cfg(m, *path)
        if value is not None:
            keys.append(f"{key}={value}")  # in full: the effective tick must match to the bit
    return " ".join(keys + [f"out={out}"])


def _run_info(m: Manifest, log: EventLog, out: Path = Path("runs"), name: str = "") -> RunInfo:
    stats = log.read("instance_stats")
    leases = log.read("leases")
    duration = float(_cfg(m, "duration_min", default=0) or 0) * 60.0
    if not duration:
        duration = float(stats.t_s.max()) if len(stats) else 0.0
    scale = _cfg(m, "load_scale", default="-")
    return RunInfo(name or f"{m.pattern}/{m.config}/{m.rep}", m.pattern, duration, scale,
                   int(stats.instance.nunique()), int(len(leases)),
                   str(_cfg(m, "runtime", "measurement", default="milliseconds")),
                   str(_cfg(m, "profile", default="") or ""), twin_command(m, out))


def _read(log: EventLog, run: str) -> Dict[str, pd.DataFrame]:
    missing = [t for t in TABLES if not log.has(t)]
    if missing:
        raise ProfileError(f"{run}: no {', '.join(missing)} table")
    tables = {t: log.read(t) for t in TABLES}
    if log.has(CPU_TABLE):
        tables[CPU_TABLE] = log.read(CPU_TABLE)
    return tables


def _engine_cores(m: Manifest) -> Optional[float]:
    """The engine's CPU count if the run recorded one (details.engine_cpus or details.engines[*].cpus)."""
    d = m.details if isinstance(m.details, dict) else {}
    if d.get("engine_cpus"):
        return float(d["engine_cpus"])
    engines: List[Any] = d["engines"] if isinstance(d.get("engines"), list) else []
    cpus = [float(e["cpus"]) for e in engines if isinstance(e, dict) and e.get("cpus")]
    return sum(cpus) if cpus and len(cpus) == len(engines) else None


Roots = Union[str, Path, Sequence[Union[str, Path]]]


def measure(roots: Roots, cores: Optional[float] = None) -> Measured:
    """The live testbed's figures from the live runs below one or more runs folders, pooled; with
    several runs, each value measured from every run alone too (`per_run`, for its spread).
    ProfileError when there are none."""
    folders = [Path(roots)] if isinstance(roots, (str, Path)) else [Path(r) for r in roots]
    runs, manifests, measurement, step = _live_manifests(folders)
    names = _run_names(runs, manifests)
    cores, source = _machine_cores(manifests[0], cores)
    root = ", ".join(str(f) for f in folders)
    pooled = _measure_runs(root, runs, manifests, names, step, measurement, cores, source)
    if len(runs) > 1:
        pooled.per_run = {n: profile_values(_measure_runs(root, [d], [m], [n], step, measurement, cores, source))
                          for d, m, n in zip(runs, manifests, names, strict=True)}
    return pooled


def _run_names(runs: Sequence[Path], manifests: Sequence[Manifest]) -> List[str]:
    """pattern/config/rep per run, or the run folder where two runs of several runs folders share it."""
    short = [f"{m.pattern}/{m.config}/{m.rep}" for m in manifests]
    return short if len(set(short)) == len(short) else [str(d) for d in runs]


def _measure_runs(root: str, runs: Sequence[Path], manifests: Sequence[Manifest], names: Sequence[str],
                  step: float, measurement: str, cores: float, cores_source: str) -> Measured:
    infos, per_service, edges, starts, reports, leases_, busy = [], [], [], [], [], [], []
    tables_by_run, latencies, processed, without_cpu, without_delay, loads = [], [], [], [], [], {}
    for d, m, name in zip(runs, manifests, names, strict=True):
        log = EventLog(d)
        try:
            tables = _read(log, name)
            infos.append(_run_info(m, log, d.parent.parent.parent, name))
        except (EventLogError, KeyError) as exc:
            raise ProfileError(f"{name}: a table cannot be read: {exc}") from exc
        par = _parallel(m)
        rows = service_per_interval(tables["instance_stats"], step, par, name, tables.get(CPU_TABLE))
        if not rows.cpu_known.all():
            without_cpu.append(name)
        if not rows.delay_known.all():
            without_delay.append(name)
        per_service.append(rows)
        loads[name] = (m.details if isinstance(m.details, dict) else {}).get("machine_load") or {}
        edges.append(tables["edges"])
        processed.append(tables["instance_stats"].groupby("operator").processed.sum())
        starts.append(_starts(m))
        latencies.append(_starts(m, "start_latency_s"))
        reports.append(_request_to_report(tables["placements"], tables["instance_stats"]))
        leases_.append(lease_delays(tables["leases"], tables["hosts"], step))
        busy.append(_busy_cores(tables["instance_stats"], par))
        tables_by_run.append(tables)
    m0 = manifests[0]
    operators: Dict[str, Any] = _cfg(m0, "topology", "operators", default={}) or {}
    rows = pd.concat(per_service, ignore_index=True)
    clock = service_clock(without_cpu, without_delay)  # one clock for every run: the values are pooled
    service = {op: _service(op, rows[rows.operator == op], step, cores, clock)
               for op in sorted(set(rows.operator) | set(operators))}
    means = {op: s.wall_mean_ms for op, s in service.items()}  # a duration is wall time: less the wall service
    hops: Dict[str, List[np.ndarray]] = {}
    for tables in tables_by_run:
        for op, v in quiet_hops(tables["samples"], tables["queues"], means).items():
            hops.setdefault(op, []).append(v)
    all_edges = pd.concat(edges, ignore_index=True)
    copied, configured = _settings(m0)
    return Measured(root=root, runs=infos, service=service,
                    emission=_emissions(all_edges, pd.concat(processed).groupby(level=0).sum(), operators),
                    hop_by_operator={op: np.concatenate(v) for op, v in sorted(hops.items())},
                    source_fed=source_fed(all_edges, sorted(service)), measurement=measurement,
                    container_start_s=np.concatenate(starts), start_latency_s=np.concatenate(latencies),
                    request_to_report_s=np.concatenate(reports),
                    lease_delay_s=np.concatenate(leases_), monitoring_s=step, busy_cores=np.concatenate(busy),
                    copied=copied, cores=float(cores), cores_source=cores_source, configured=configured,
                    without_cpu=without_cpu, machine_load=loads, without_delay=without_delay,
                    competing={n: competing_threads(r, loads[n]) for n, r in zip(names, per_service, strict=True)})


def _live_manifests(roots: Sequence[Path]) -> Tuple[List[Path], List[Any], str, float]:
    """The complete live runs below the roots and their manifests, which must agree on the measurement
    rule and the monitoring interval (the values are pooled)."""
    runs: List[Path] = []
    for root in roots:
        if not root.is_dir():
            raise ProfileError(f"{root}: no such folder")
        found = live_runs(root)
        if not found:
            raise ProfileError(f"{root}: no complete live runs (backend {LIVE} in their manifests)")
        runs += [d for d in found if d not in runs]
    manifests = [read_manifest(d) for d in runs]
    measurements = {str(_cfg(m, "runtime", "measurement", default="milliseconds")) for m in manifests}
    steps = {float(_cfg(m, "runtime", "monitoring_s", default=15.0)) for m in manifests}
    if len(measurements) > 1 or len(steps) > 1:
        raise ProfileError(f"{', '.join(map(str, roots))}: the live runs differ in runtime.measurement "
                           f"{sorted(measurements)} or runtime.monitoring_s {sorted(steps)}")
    return runs, manifests, measurements.pop(), steps.pop()


def _machine_cores(m0: Any, cores: Optional[float]) -> Tuple[float, str]:
    """The cores the live hosts shared, and where the figure came from."""
    if cores is not None:
        return cores, "the cores= argument"
    if (engine := _engine_cores(m0)) is not None:
        return engine, "the engine's CPU count recorded in the manifest"
    return (float(os.cpu_count() or 1),
            "os.cpu_count() of the machine that made this profile (the run recorded no CPU count)")


def _settings(m0: Any) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """The run's settings the simulator copies, and the configured values shown beside measured ones."""
    copied = {f"runtime.{k}": _cfg(m0, "runtime", k) for k in RUNTIME_KEYS if _cfg(m0, "runtime", k) is not None}
    copied["backend.live.parallel"] = _parallel(m0)
    configured = {k: _cfg(m0, "infrastructure", k) for k in ("container_start_s", "lease_delay_s", "pull_mb_per_s")}
    configured["emulate_pull"] = _cfg(m0, "backend", "live", "emulate_pull")
    configured["work_ms"] = _cfg(m0, "backend", "live", "work_ms")
    return copied, configured



def _sig(x: float) -> float:
    return float(f"{x:.3g}")


def profile_values(m: Measured) -> Dict[str, Any]:
    """The profile's keys (dotted); a value the runs did not measure is left out."""
    v: Dict[str, Any] = {}
    for key, val in m.copied.items():
        if key != "backend.live.parallel":
            v[key] = val
    v["backend.shared_cores"] = _sig(m.cores)
    if math.isfinite(m.hop_latency_ms):
        v["backend.hop_latency_ms"] = _sig(max(0.0, m.hop_latency_ms))
    for key, d in (("infrastructure.container_start_s", m.container_start_s),
                   ("infrastructure.lease_delay_s", m.lease_delay_s)):
        if d.size >= MIN_STARTS:
            v[key] = [_sig(float(d.min())), _sig(float(d.max()))]
    for op, s in m.service.items():
        base = f"topology.operators.{op}"
        if math.isfinite(s.mean_ms):
            v[f"{base}.service.mean_ms"] = _sig(s.mean_ms)
            v[f"{base}.service.parallel"] = m.copied["backend.live.parallel"]
        if math.isfinite(s.cv):
            v[f"{base}.service.cv"] = _sig(s.cv)
        if math.isfinite(s.wait_ms):
            v[f"{base}.service.wait_ms"] = _sig(s.wait_ms)
    for op in INCIDENT_OPERATORS:
        e = m.emission.get(op)
        if e is not None and math.isfinite(e.in_per_out):
            v[f"topology.operators.{op}.emission"] = {"sim": "incident", "live": "incident",
                                                     "items_per_incident": _sig(e.in_per_out)}
    return v


def header(m: Measured, name: str) -> List[str]:
    """The profile's comment: where every value came from, how many observations, their spread."""
    return [*_runs_lines(m), *_load_lines(m), *_service_lines(m), *_output_lines(m), *_hop_lines(m),
            *_start_lines(m), *spread_lines(m), *twin_lines(m, name)]


@dataclass(frozen=True)
class RunSpread:
    """One profile value measured from every run alone."""

    key: str
    values: Tuple[float, ...]  # one per run that measured it

    @property
    def low(self) -> float:
        return min(self.values)

    @property
    def median(self) -> float:
        return float(np.median(self.values))

    @property
    def high(self) -> float:
        return max(self.values)


def run_spreads(m: Measured) -> List[RunSpread]:
    """Per numeric profile value: its values from each run alone, in the profile's key order (a range
    value, such as the container start's [min, max], by its two ends)."""
    keys = list(profile_values(m))
    found: Dict[str, List[float]] = {}
    for values in m.per_run.values():
        for key, v in values.items():
            for k, x in _numbers(key, v):
                found.setdefault(k, []).append(x)

    def rank(k: str) -> int:
        return next((i for i, key in enumerate(keys) if k == key or k.startswith((key + ".", key + "["))), len(keys))

    return [RunSpread(k, tuple(v)) for k, v in sorted(found.items(), key=lambda kv: rank(kv[0]))]


def _numbers(key: str, value: Any) -> List[Tuple[str, float]]:
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [(key, float(value))]
    if isinstance(value, list) and len(value) == 2 and all(isinstance(x, (int, float)) for x in value):
        return [(f"{key}[min]", float(value[0])), (f"{key}[max]", float(value[1]))]
    if isinstance(value, dict):
        return [x for k, v in value.items() for x in _numbers(f"{key}.{k}", v)]
    return []


def spread_lines(m: Measured) -> List[str]:
    """The spread of every measured value across the runs, each measured alone (the profile's values
    pool them): what one run's value is worth as a reference."""
    spreads = run_spreads(m)
    if not spreads:
        return []
    lines = [f"spread across the {len(m.per_run)} runs, each measured alone (min / median / max, runs that measured "
             "it; the values above pool them):"]
    for s in spreads:
        if s.key in m.copied or s.key == "backend.shared_cores" or s.key.endswith(".parallel"):
            continue  # copied or given, the same in every run
        lines.append(f"  {s.key}: {s.low:g} / {s.median:g} / {s.high:g} (n={len(s.values)})")
    return lines


def twin_lines(m: Measured, name: str) -> List[str]:
    """How to simulate the live runs' configurations beside them with this profile, as commands that run
    as written. mix=true: the simulated runs use this profile, the live ones theirs, so their settings
    differ and the runs folder refuses them otherwise."""
    commands = list(dict.fromkeys(r.twin for r in m.runs if r.twin))
    return (["the simulator beside the live runs (mix=true: this profile's settings differ from the live runs', "
             "which the runs folder refuses otherwise; the report's \"Simulator vs live\" section compares them):"]
            + [f"  testbed experiment {c} profile={name} mix=true" for c in commands])


def _load_lines(m: Measured) -> List[str]:
    """The machine's load from other processes during each run (the manifest's machine_load)."""
    lines = ["machine load from other processes (manifest machine_load: cores busy outside the run's containers, "
             "the testbed process and its services); cores left = cpus - mean, the backend.shared_cores that "
             "simulates a run under that load as fewer cores; competing threads = mean / the share of a core the "
             "run's CPU-heaviest operator got while runnable (CPU / (CPU + run-queue delay)), the "
             "backend.competing_threads that simulates it with the machine's cores (docs/fidelity.md):"]
    for run, load in m.machine_load.items():
        other = load.get("other_cores")
        if isinstance(other, dict):
            lines.append(f"  {run}: mean {other.get('mean')}, p95 {other.get('p95')}, max {other.get('max')} of "
                         f"{load.get('cpus')} cores{_cores_left(load.get('cpus'), other.get('mean'))}"
                         f"{_competing(m.competing.get(run, math.nan))}; "
                         f"the run's containers mean {(load.get('containers_cores') or {}).get('mean')}"
                         + ("" if load.get("local_engines", True) else " (a remote engine: not the hosts' machine)"))
        else:
            lines.append(f"  {run}: not recorded ({load.get('unreadable') or 'a run from before it was recorded'})")
    return lines


def _competing(threads: float) -> str:
    return f", competing threads {threads:.2f}" if math.isfinite(threads) else ""


def _cores_left(cpus: object, other_mean: object) -> str:
    """", cores left X": the machine's cores less the mean other load, at least a tenth of a core
    (backend.shared_cores must be > 0); "" when either is missing."""
    if not isinstance(cpus, (int, float)) or not isinstance(other_mean, (int, float)):
        return ""
    return f", cores left {max(0.1, round(float(cpus) - float(other_mean), 2)):g}"


def _runs_lines(m: Measured) -> List[str]:
    lines = [f"Measured on the live testbed by `testbed live-profile` from {m.root}: {len(m.runs)} complete run(s),"]
    for r in m.runs:
        lines.append(f"  {r.name}: pattern {r.pattern}, {r.duration_s:g} s, scale {r.scale}, "
                     f"{r.instances} instance(s), {r.hosts} host(s), runtime.measurement {r.measurement}, "
                     f"profile {r.profile or '-'}")
    base = base_profile(m)
    lines.append("Only measured or copied keys are set here; everything else (the policies' settings, billing, the "
                 + (f"emulated lease delay) comes from the runs' own profile {base}, which this one extends."
                    if base else "emulated lease delay) from the profile a run selects: the runs share none."))
    return lines + ["", "copied, not measured (the live runs' settings): "
                    + ", ".join(f"{k}={v}" for k, v in m.copied.items())]


CV_TEXT = ("cv from consecutive intervals' means, median (s_i - s_j)^2 / (1/n_i + 1/n_j) / 0.4549; spread cv "
           "around the one mean beside it")


def _service_lines(m: Measured) -> List[str]:
    if m.clock == SERVICE:
        head = ["service time from busy wall time less run-queue delay (instance_cpu.busy_ms - run_delay_ms: the "
                "worker slots' busy time less the time their threads and the processes they ran waited for a CPU "
                "inside the busy periods, / items, over every interval with work: it keeps the operator's waits for "
                "Redis and the broker and holds no wait for a CPU, which backend.shared_cores adds in the "
                f"simulator); {CV_TEXT}; CPU time and run-queue delay per item beside it (over every interval), "
                f"and busy wall time (over the intervals within the {m.cores:g} shared cores):"]
    elif m.clock == CPU:
        head = [f"WARNING: service time from CPU time, not busy wall time less run-queue delay: "
                f"{', '.join(m.without_delay)} recorded no run-queue delay (an image from before it existed). CPU "
                "time leaves out the operators' waits for Redis and the broker.",
                "service time from CPU time (instance_cpu.cpu_ms: the worker threads' CPU clocks and the processes "
                "they ran, / items, over every interval with work: it holds no wait for a CPU, which "
                "backend.shared_cores adds in the simulator, nor the operator's waits for Redis, which busy wall "
                f"time keeps); {CV_TEXT}; busy wall time per item beside it (over the intervals within the "
                f"{m.cores:g} shared cores):"]
    else:
        head = [f"WARNING: service time from busy wall time, not CPU time: {', '.join(m.without_cpu)} recorded no "
                "CPU time (run before instance_cpu existed, or an instance did not report it). Busy wall time "
                "includes the wait for a CPU, so it grows with what else the machine ran.",
                f"service (instance_stats: busy = utilisation x {m.monitoring_s:g} s x parallel, / items, over the "
                f"intervals whose busy slots of all instances stay within the {m.cores:g} shared cores: beyond, a "
                "slot counts its wait for the CPU as busy, which backend.shared_cores adds again); "
                f"{CV_TEXT} (slowdowns by the shared CPU count as item variability: an upper estimate):"]
    return head + [_service_line(op, s) for op, s in m.service.items()]


def _service_line(op: str, s: Service) -> str:
    if not math.isfinite(s.mean_ms):
        return f"  {op}: not measured ({s.intervals} interval(s) with work, fewer than {MIN_INTERVALS})"
    cv = (f"cv {s.cv:.3f} ({s.pairs} pairs; spread cv {s.spread_cv:.3f})" if math.isfinite(s.cv)
          else f"cv not measured ({s.pairs} consecutive pairs, fewer than {MIN_CV_INTERVALS})")
    calm = (f"{s.wall_intervals} of {s.all_intervals} intervals within the shared cores" if s.uncontended
            else f"all {s.wall_intervals} intervals: fewer than {MIN_INTERVALS} within the shared cores")
    if s.clock == SERVICE:
        which = (f"all {s.intervals} intervals; CPU time {s.cpu_mean_ms:.2f} ms, run-queue delay "
                 f"{s.delay_mean_ms:.2f} ms; busy wall time {s.wall_mean_ms:.2f} ms over {calm}, "
                 f"{s.all_mean_ms:.2f} ms over all")
    elif s.clock == CPU:
        which = (f"all {s.intervals} intervals; busy wall time {s.wall_mean_ms:.2f} ms over {calm}, "
                 f"{s.all_mean_ms:.2f} ms over all")
    else:
        which = f"{calm}; all intervals {s.all_mean_ms:.2f} ms"
    return (f"  {op}: mean {s.mean_ms:.2f} ms over {s.items} items ({which}), {cv}; per-interval means "
            f"{spread(s.per_interval_ms, decimals=2)} ms; {s.capped} interval(s) with an instance at utilisation 1")


def _output_lines(m: Measured) -> List[str]:
    lines = ["output (edges out / items processed (instance_stats), not the edges in: a backlog left at the end "
             "emitted nothing; topology ratio_out / ratio_in beside it):"]
    for op, e in m.emission.items():
        if op in INCIDENT_OPERATORS:
            lines.append(f"  {op}: {e.items_in} in, {e.processed} processed, {e.items_out} out (incidents): "
                         f"{e.in_per_out:.1f} items per incident "
                         f"(emission.items_per_incident; the run's setting {e.configured_per_incident:g}; from "
                         f"{e.items_out} incidents, +- {100 / math.sqrt(e.items_out):.0f} % if they are Poisson)"
                         if e.items_out else
                         f"  {op}: {e.items_in} in, no output: items_per_incident not measured")
        else:
            flag = "" if not math.isfinite(e.out_per_in) or abs(e.out_per_in - e.structural) <= 0.05 * max(
                e.structural, 1e-9) else "  <- differs from the topology"
            lines.append(f"  {op}: {e.items_in} in, {e.processed} processed, {e.items_out} out: "
                         f"{e.out_per_in:.4f} per input (topology {e.structural:.4f}){flag}")
    return lines


def _hop_lines(m: Measured) -> List[str]:
    trunc = (f"mean - {TRUNCATION_MEAN_MS:g} ms (seconds_truncated adds U(0, 1 s) to every duration)"
             if m.measurement == "seconds_truncated" else "median")
    hop = f"not measured (< {MIN_HOPS} samples)"
    if math.isfinite(m.hop_latency_ms):  # the standard error: under truncation mostly the uniform's 289 ms / sqrt(n)
        hop = f"{m.hop_latency_ms:.1f} ms +- {np.std(m.hop_ms) / math.sqrt(m.hop_ms.size):.1f} (standard error)"
    lines = [f"hop latency (samples in intervals with the queue empty at both ends: duration - service, {trunc}; "
             f"operators fed by operators only, not {', '.join(m.source_fed) or '-'}: a source's tick arrives "
             f"at once and queues behind itself): {hop}; duration - service {spread(m.hop_ms, decimals=0)} ms"]
    for op, v in m.hop_by_operator.items():
        est = m.hop_estimate(v)
        lines.append(f"  {op}{' (source-fed, not used)' if op in m.source_fed else ''}: "
                     + (f"{est:.1f} ms" if math.isfinite(est) else "too few") + f" (n={v.size})")
    return lines


def _start_lines(m: Measured) -> List[str]:
    """Container start, lease delay, the shared cores and the emulated work."""
    cs = m.configured
    busy = m.busy_cores

    def stat(f: Any) -> float:
        return float(f(busy)) if busy.size else math.nan

    return [
        f"container start (manifest instance records: docker run -> running, instances started during the "
        f"run): {spread(m.container_start_s, decimals=2)} s; configured {cs.get('container_start_s')}"
        + ("" if m.container_start_s.size >= MIN_STARTS else "; not measured: key left out"),
        f"  request -> running (manifest instance records: host boot and emulated pull included): "
        f"{spread(m.start_latency_s, decimals=2)} s",
        f"  scale-up request -> first instance_stats row (host boot, emulated pull at "
        f"{cs.get('pull_mb_per_s')} MB/s (emulate_pull {cs.get('emulate_pull')}), +- {m.monitoring_s:g} s): "
        f"{spread(m.request_to_report_s)} s",
        f"lease delay (leases start -> hosts ready, interval midpoint +- {m.monitoring_s / 2:g} s; the live "
        f"pool waits a delay drawn from the configured {cs.get('lease_delay_s')}): {spread(m.lease_delay_s)} s"
        + ("" if m.lease_delay_s.size >= MIN_STARTS else "; not measured: key left out"),
        f"shared cores {m.cores:g}: {m.cores_source}; busy cores per interval (sum of utilisation x parallel): "
        f"mean {stat(np.mean):.2f}, p95 {stat(lambda x: np.percentile(x, 95)):.2f}, max {stat(np.max):.2f} "
        f"(n={busy.size})",
        f"emulated work (backend.live.work_ms): {cs.get('work_ms') or 'none, the operators real work'}",
    ]


def _nest(values: Dict[str, Any]) -> Dict[str, Any]:
    tree: Dict[str, Any] = {}
    for key, v in values.items():
        node = tree
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = v
    return tree


def base_profile(m: Measured) -> str:
    """The profile every run was configured with ("" if they differ or name none): the written one
    extends it, so that a simulated twin shares every setting that was not measured."""
    names = {r.profile for r in m.runs}
    return names.pop() if len(names) == 1 else ""


def profile_yaml(m: Measured, name: str) -> str:
    import yaml

    out = ["# @package _global_"] + [f"# {line}".rstrip() for line in header(m, name)]
    base = base_profile(m)
    if base and base != name:
        out += ["defaults:", f"  - {base}", "  - _self_"]
    body = yaml.safe_dump({"profile": name, **_nest(profile_values(m))}, sort_keys=False, default_flow_style=False)
    return "\n".join(out) + "\n" + body


def _args(argv: Sequence[str]) -> Tuple[List[Path], Dict[str, str]]:
    pos = [a for a in argv if "=" not in a]
    kv = dict(a.split("=", 1) for a in argv if "=" in a)
    unknown = sorted(set(kv) - {"name", "out", "cores", "force"})
    if not pos or unknown or "name" not in kv:
        raise ProfileError(f"{USAGE}" + (f" (unknown: {', '.join(unknown)})" if unknown else ""))
    if not re.fullmatch(r"[A-Za-z0-9_]+", kv["name"]):
        raise ProfileError(f"name: letters, digits and _ only, got {kv['name']!r}")
    return [Path(p) for p in pos], kv


def _cores(kv: Dict[str, str]) -> Optional[float]:
    """The cores= argument: what the profile's backend.shared_cores will be, so the experiment's own
    check of that key applies (0, "off" there, measures nothing here)."""
    if "cores" not in kv:
        return None
    try:
        cores = float(kv["cores"])
    except ValueError:
        raise ProfileError(f"cores: a positive number, got {kv['cores']!r}") from None
    return validate_cores("cores", cores, allow_off=False)


def main(argv: Sequence[str]) -> int:
    try:
        roots, kv = _args(argv)
        cores = _cores(kv)
        target = target_argument(kv)
        m = measure(roots, cores)
        text = profile_yaml(m, kv["name"])
        path = target.write(text)
    except (ProfileError, ConfigError) as exc:
        print(f"live-profile: {exc}", file=sys.stderr)
        return 2
    print(text, end="")
    print(f"wrote {path}", file=sys.stderr)
    return 0
