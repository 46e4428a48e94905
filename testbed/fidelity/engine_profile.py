"""A job-mode simulator profile measured on a real engine (`testbed engine-profile RUNS name=NAME`):
the Flink runs of a runs folder (configurations named `<configuration>-flink`, testbed/live/flink_job.py)
give the simulator's job model (testbed/sim/job.py, `job.*`) values measured, not assumed:

* **rescale downtime** out and in: the `rescales` table's downtime (from the controller's action until
  the job runs at the new parallelism), per direction; the simulator draws U(low, high), so the
  profile takes the lowest and highest measured; per parallelism step in the header;
* **capacity**, where it shows: the throughput of seconds that start with a backlog (the job processes
  as fast as its hottest TaskManager lets it), by the number n of TaskManagers processing; per
  TaskManager that / n. The simulator normalises the workload to `job.peak_fraction` of its capacity
  at `job.capacity_workers`, so the profile sets the fraction the engine really ran at: the run's
  peak rate / the measured capacity at that parallelism;
* **latency floor** (`job.base_latency_ms`): the median per-second latency of steady seconds (running,
  no rescale or its catch-up under way, not the first second after a stop) at low load (arrivals at
  most `low_load` x the deployed TaskManagers' capacity) with no backlog beyond one second's arrivals;
* **the CPU reading** a controller sees: a TaskManager's busy fraction against throughput / its
  capacity in steady seconds without a backlog, mean and sd, in the header only: Flink's busy time
  lags the load by seconds and reads high (parks overshoot their 1 ms), a bias and a lag that
  `job.cpu_noise` (zero-mean white noise) cannot stand for, so the evaluation's value stays;
* **keys**: the job's vocabulary and Zipf exponent (the settings the runs recorded);
* **catch-up** after a restart (until the lag is back, less the downtime) and the **stop** (seconds
  with nothing processed within a rescale): measured, in the header only, the simulator has no key
  for them.

The simulator runs in the paper's time while a Flink run compresses it by f
(`backend.flink.time_compression`): every duration measured on Flink (seconds and latency ms) is
multiplied by f for the profile, so that the simulator at the same evaluation is the engine at its
compressed scale."""
from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import pandas as pd

from testbed.arguments import ConfigError
from testbed.eventlog import EventLog, EventLogError, read_manifest
from testbed.fidelity.measured_runs import complete_runs, spread
from testbed.fidelity.profile_file import target_argument

ENGINE = "flink"  # the backend whose runs are measured, as manifests name it
LOW_LOAD = 0.3  # offered load / the deployed TaskManagers' capacity up to which a second counts as low load
USAGE = ("usage: testbed engine-profile RUNS_DIR name=NAME [out=FILE.yaml] [low_load=0.3] "
         "[downtime=rescale|stop|split] [force=true]")


class ProfileError(ValueError):
    """Input a profile cannot be measured from (one line, for the user)."""


@dataclass
class Rescale:
    run: str
    t_s: float
    from_n: int
    to_n: int
    downtime_s: float  # real seconds until the job ran at to_n
    stop_s: float  # real seconds of it with nothing processed
    catchup_s: float  # real seconds from running at to_n until the lag was back (NaN: not within the run)

    @property
    def out(self) -> bool:
        return self.to_n > self.from_n


@dataclass
class Measured:
    """What the Flink runs of a folder measured, in the engine's (real) time."""

    root: str
    runs: List[str]
    f: float  # time compression of the runs
    peak_rate: float  # the workload's peak, sentences/s
    capacity_workers: int
    rescales: List[Rescale]
    floor_ms: np.ndarray  # per-second latency at low load
    tm_capacity: np.ndarray  # per second that started with a backlog: the job's throughput / n
    job_capacity: Dict[int, np.ndarray]  # per parallelism: per-second job capacity
    busy_residual: np.ndarray  # per TaskManager-second: busy fraction - throughput / mu
    low_load: float
    keys: Optional[Tuple[int, float]] = None  # the job's vocabulary and Zipf exponent

    @property
    def mu(self) -> float:
        """One TaskManager's capacity for classifying load: at the evaluation's reference parallelism
        where measured (most of the runs' time is spent there, and a loaded machine slows the others),
        else the median over all samples."""
        cw = self.capacity_workers
        if cw and cw in self.job_capacity and self.job_capacity[cw].size:
            return float(np.median(self.job_capacity[cw])) / cw
        return float(np.median(self.tm_capacity))

    def downtimes(self, out: bool, kind: str = "rescale") -> np.ndarray:
        """Real seconds per rescale of a direction: until running at the new parallelism ("rescale"),
        or of it the seconds with nothing processed ("stop")."""
        return np.array([r.downtime_s if kind == "rescale" else r.stop_s for r in self.rescales if r.out == out],
                        dtype=float)


def engine_runs(root: Path) -> List[Path]:
    """The complete runs below root that ran on Flink (named `<configuration>-flink`)."""
    return complete_runs(root, ENGINE, lambda m: bool(m.details.get("flink")))


def _time_compression(details: Dict[str, Any], cfg: Dict[str, Any]) -> float:
    f = details.get("time_compression") or cfg.get("backend", {}).get("flink", {}).get("time_compression")
    return float(f) if f else 1.0


def _stop_seconds(processed: pd.DataFrame, start: float, end: float) -> float:
    """Seconds in (start, end] in which the job processed nothing."""
    sel = processed[(processed.t_s > start) & (processed.t_s <= end)]
    return float((sel["items"] <= 0).sum())


def _run_rescales(name: str, log: EventLog, processed: pd.DataFrame) -> List[Rescale]:
    if not log.has("rescales"):
        return []
    out = []
    for r in log.read("rescales").itertuples():
        if not math.isfinite(r.downtime_s):  # the run ended before the job ran at the new parallelism
            continue
        catchup = r.recovered_s - r.downtime_s if math.isfinite(r.recovered_s) else math.nan
        out.append(Rescale(name, float(r.t_s), int(r.from_n), int(r.to_n), float(r.downtime_s),
                           _stop_seconds(processed, r.t_s, r.t_s + r.downtime_s), float(catchup)))
    return out


def _per_second(log: EventLog, rescales: Sequence[Rescale]) -> pd.DataFrame:
    """One row per monitoring interval: parallelism, running, backlog, arrivals and processed, whether
    it is the first interval after a stop (a partial second) and whether a rescale is under way (from
    its action until its lag is back, or the next rescale)."""
    inst = log.read("instances")[["t_s", "instances", "starting"]]
    q = log.read("queues")[["t_s", "depth"]]
    edges = log.read("edges")[["t_s", "items"]].rename(columns={"items": "arrived"})
    proc = log.read("processed")[["t_s", "items"]].rename(columns={"items": "done"})
    df = inst.merge(q, on="t_s").merge(edges, on="t_s").merge(proc, on="t_s")
    t = df.t_s.to_numpy()
    step = float(np.median(np.diff(t))) if len(df) > 1 else 1.0
    df["step"] = step
    done = df.done.to_numpy()
    df["resumed"] = np.concatenate([[True], done[:-1] <= 0])  # the first interval after nothing processed
    starts = sorted(r.t_s for r in rescales)
    in_rescale = np.zeros(len(df), dtype=bool)
    for r in rescales:
        later = [s for s in starts if s > r.t_s]
        end = r.t_s + r.downtime_s + r.catchup_s if math.isfinite(r.catchup_s) else math.inf
        end = min(end, later[0] if later else math.inf)
        in_rescale |= (t > r.t_s) & (t <= end)
    df["rescaling"] = in_rescale
    df["steady"] = (df.instances > 0) & (df.starting == 0) & ~df.rescaling & ~df.resumed
    return df


def _capacities(stats: pd.DataFrame, sec: pd.DataFrame) -> Tuple[np.ndarray, Dict[int, List[float]]]:
    """Capacity where it shows: in an interval that starts with a backlog of more than one interval's
    arrivals the job processes as fast as it can, its hottest TaskManager limiting it. The job's
    throughput then, by the number of TaskManagers that processed (during a scale-out's start the old
    ones), and per TaskManager that / n. Not the busy readings: Flink's busy time lags by seconds.
    Intervals next to a stop (partial) are left out."""
    done = sec.done.to_numpy()
    stopping = np.concatenate([done[1:] <= 0, [True]])
    prev_depth = np.concatenate([[0], sec.depth.to_numpy()[:-1]])
    full = sec[(prev_depth > sec.arrived) & (sec.depth > 0) & ~sec.resumed & ~stopping & (sec.done > 0)]
    step = float(sec.step.iloc[0]) if len(sec) else 1.0
    s = stats[stats.t_s.isin(full.t_s) & (stats.processed > 0)]
    per_tm: List[float] = []
    job: Dict[int, List[float]] = {}
    for _, g in s.groupby("t_s"):
        total = float(g.processed.sum()) / step
        job.setdefault(len(g), []).append(total)
        per_tm.append(total / len(g))
    return np.array(per_tm), job


def _measure_run(run_dir: Path) -> Dict[str, Any]:
    m = read_manifest(run_dir)
    log = EventLog(run_dir)
    name = f"{m.pattern}/{m.config}/{m.rep}"
    processed = log.read("processed")
    rescales = _run_rescales(name, log, processed)
    sec = _per_second(log, rescales)
    stats = log.read("instance_stats")
    tm_cap, job_cap = _capacities(stats, sec)
    cfg = m.resolved_config
    settings = m.details.get("flink", {}).get("settings", {})
    keys = (int(settings["vocabulary"]), float(settings["zipf"])) if {"vocabulary", "zipf"} <= set(settings) else None
    return {"name": name, "f": _time_compression(m.details, cfg), "rescales": rescales, "sec": sec,
            "stats": stats, "latency": log.read("latency"), "tm_cap": tm_cap, "job_cap": job_cap, "keys": keys,
            "peak_rate": float(m.details.get("job", {}).get("peak_rate", math.nan)),
            "capacity_workers": int(cfg.get("job", {}).get("capacity_workers", 0))}


def _floor_and_noise(run: Dict[str, Any], mu: float, low_load: float) -> Tuple[np.ndarray, np.ndarray]:
    """Per-second latency of the steady intervals at low load (arrivals / (n x mu) <= low_load, no
    backlog beyond one interval's arrivals), and the busy readings' deviation from throughput / mu in
    steady intervals without a backlog."""
    sec = run["sec"]
    step = float(sec.step.iloc[0]) if len(sec) else 1.0
    calm = sec[sec.steady & (sec.depth <= sec.arrived)]
    low = calm[calm.arrived / step <= low_load * calm.instances * mu]
    lat = run["latency"]
    floor = lat[lat.t_s.isin(low.t_s)].latency_ms.to_numpy(dtype=float)
    st = run["stats"]
    st = st[st.t_s.isin(calm.t_s)]
    residual = (st.utilisation - st.processed / step / mu).to_numpy(dtype=float)
    return floor, residual


def measure(root: Path, low_load: float = LOW_LOAD) -> Measured:
    """The engine's figures from the Flink runs below root; ProfileError when there are none to use."""
    root = Path(root)
    if not root.is_dir():
        raise ProfileError(f"{root}: no such folder")
    runs = engine_runs(root)
    if not runs:
        raise ProfileError(f"{root}: no complete Flink runs (backend {ENGINE} in their manifests)")
    try:
        per_run = [_measure_run(d) for d in runs]
    except (EventLogError, KeyError) as exc:
        raise ProfileError(f"{root}: a Flink run's tables cannot be read: {exc}") from exc
    fs = {r["f"] for r in per_run}
    if len(fs) > 1:
        raise ProfileError(f"{root}: the Flink runs have different time compressions {sorted(fs)}")
    rescales = [x for r in per_run for x in r["rescales"]]
    if not rescales:
        raise ProfileError(f"{root}: the Flink runs have no completed rescales to measure downtimes from")
    peaks = {round(r["peak_rate"], 6) for r in per_run if math.isfinite(r["peak_rate"])}
    cws = {r["capacity_workers"] for r in per_run if r["capacity_workers"]}
    if len(peaks) > 1 or len(cws) > 1:
        raise ProfileError(f"{root}: the Flink runs differ in their peak rate {sorted(peaks)} or "
                           f"job.capacity_workers {sorted(cws)}")
    tm_cap = np.concatenate([r["tm_cap"] for r in per_run])
    job_cap: Dict[int, List[float]] = {}
    for r in per_run:
        for n, v in r["job_cap"].items():
            job_cap.setdefault(n, []).extend(v)
    if not tm_cap.size:
        raise ProfileError(f"{root}: no second with a backlog in the Flink runs to measure the capacity from")
    keys = {r["keys"] for r in per_run if r["keys"]}
    m = Measured(root=str(root), runs=[r["name"] for r in per_run], f=fs.pop(),
                 peak_rate=peaks.pop() if peaks else math.nan, capacity_workers=cws.pop() if cws else 0,
                 rescales=rescales, floor_ms=np.array([]), tm_capacity=tm_cap,
                 job_capacity={n: np.array(v) for n, v in sorted(job_cap.items())},
                 busy_residual=np.array([]), low_load=low_load, keys=keys.pop() if len(keys) == 1 else None)
    floors, residuals = zip(*(_floor_and_noise(r, m.mu, low_load) for r in per_run), strict=True)
    m.floor_ms, m.busy_residual = np.concatenate(floors), np.concatenate(residuals)
    return m


def profile_values(m: Measured, downtime: str = "rescale") -> Dict[str, Any]:
    """The job.* keys of the profile, in the paper's time (the engine's durations x f); a value the
    runs did not measure (no scale-in, no low-load second, ...) is left out: the evaluation's stays.
    `downtime`: the simulator's stop-the-world lasts the whole rescale ("rescale", the job stops until
    the new parallelism runs) or only the seconds Flink processed nothing ("stop": the new capacity
    then comes at once, where Flink's came after the TaskManager's start); "split" is Flink's own
    sequence: a scale-out starts its TaskManager while the old parallelism runs (job.start_delay_s),
    then stops for the seconds nothing was processed."""
    job: Dict[str, Any] = {}
    for key, out in (("downtime_out_s", True), ("downtime_in_s", False)):
        d = m.downtimes(out, downtime if downtime != "split" else "stop" if out else "rescale")
        if d.size:
            job[key] = [round(float(d.min()) * m.f, 1), round(float(d.max()) * m.f, 1)]
    if downtime == "split":  # the new TaskManager's start, while the old parallelism keeps processing
        start = m.downtimes(True, "rescale") - m.downtimes(True, "stop")
        if start.size:
            job["start_delay_s"] = [round(float(start.min()) * m.f, 1), round(float(start.max()) * m.f, 1)]
    if m.floor_ms.size:
        job["base_latency_ms"] = round(float(np.median(m.floor_ms)) * m.f, 1)
    cap = capacity_at(m, m.capacity_workers)
    if math.isfinite(cap) and math.isfinite(m.peak_rate) and cap > 0:
        job["peak_fraction"] = round(m.peak_rate / cap, 4)
    if m.keys is not None:
        job["keys"], job["key_distribution"], job["zipf_s"] = m.keys[0], "zipf", m.keys[1]
    return job


def capacity_at(m: Measured, n: int) -> float:
    """The job's measured capacity at n TaskManagers (sentences/s); without a measurement at n, n times
    one TaskManager's; NaN without either."""
    if n in m.job_capacity and m.job_capacity[n].size:
        return float(np.median(m.job_capacity[n]))
    return n * float(np.median(m.tm_capacity)) if m.tm_capacity.size and n else math.nan


def by_step(m: Measured) -> Dict[Tuple[int, int], List[Rescale]]:
    steps: Dict[Tuple[int, int], List[Rescale]] = {}
    for r in m.rescales:
        steps.setdefault((r.from_n, r.to_n), []).append(r)
    return dict(sorted(steps.items()))


def header(m: Measured, name: str) -> List[str]:
    """The profile's comment: where every value came from (engine time, and x f for the paper's)."""
    f = m.f
    lines = [f"Measured on Apache Flink by `testbed engine-profile` from {m.root}: {len(m.runs)} complete run(s),",
             *(f"  {r}" for r in m.runs),
             f"time compression f = {f:g}. Durations are the engine's real ones x f (the simulator runs in the",
             "paper's time); in brackets the engine's own.", ""]
    for label, out in (("rescale downtime out", True), ("rescale downtime in", False)):
        d = m.downtimes(out)
        lines.append(f"{label} (rescales table: action -> running at the new parallelism), {d.size} rescale(s): "
                     f"{spread(d, f)} s [{spread(d)} s]")
    for (a, b), rs in by_step(m).items():
        d = np.array([r.downtime_s for r in rs])
        stop = np.array([r.stop_s for r in rs])
        lines.append(f"  {a} -> {b}: downtime {spread(d, f)} s; of it nothing processed {spread(stop, f)} s")
    catch = np.array([r.catchup_s for r in m.rescales])
    lines.append(f"catch-up after the restart (running -> lag back, no job.* key): {spread(catch, f)} s "
                 f"[{spread(catch)} s]")
    lines.append(f"latency floor (per-second mean latency, steady, load <= {m.low_load:g} x capacity, no backlog): "
                 f"{spread(m.floor_ms, f, 0)} ms [{spread(m.floor_ms, 1.0, 0)} ms]")
    lines.append(f"capacity per TaskManager (throughput / n of the seconds starting with a backlog): "
                 f"{spread(m.tm_capacity)} sentences/s")
    for n, v in m.job_capacity.items():
        lines.append(f"  job capacity at {n} TaskManager(s): {spread(v)} sentences/s")
    lines.append(f"peak_fraction: the run's peak {m.peak_rate:g} sentences/s / the measured capacity at "
                 f"{m.capacity_workers} ({capacity_at(m, m.capacity_workers):.1f})")
    mu = m.mu
    res = m.busy_residual
    lines.append(f"CPU reading (busy - throughput / {mu:.1f}) over {res.size} steady TaskManager-seconds: mean "
                 f"{np.mean(res) if res.size else math.nan:+.3f}, sd {np.std(res) if res.size else math.nan:.3f} "
                 "(a lag and a bias, not job.cpu_noise's white noise: not set)")
    if m.keys is not None:
        lines.append(f"keys: the job's vocabulary {m.keys[0]} words, Zipf exponent {m.keys[1]:g} (its settings)")
    lines.append("the simulator beside the Flink runs (mix: the backend's settings differ):")
    lines.append(f"  testbed experiment evaluation=<theirs> pattern=<theirs> backend=sim profile={name} mix=true "
                 "out=<their runs folder>")
    return lines


def profile_yaml(m: Measured, name: str, downtime: str = "rescale") -> str:
    values = profile_values(m, downtime)
    head = header(m, name)
    what = {"rescale": "whole rescale", "stop": "stop (nothing processed)",
            "split": "start (old parallelism running) then stop (nothing processed)"}[downtime]
    head.insert(head.index(""), f"job.downtime_*: the {what} as the simulator's stop-the-world (downtime={downtime});"
                " [lowest, highest] measured")
    out = ["# @package _global_"] + [f"# {line}".rstrip() for line in head]
    out.append(f"profile: {name}")
    out.append("job:")
    for key, v in values.items():
        text = f"[{', '.join(f'{x:g}' for x in v)}]" if isinstance(v, list) else (f"{v:g}" if isinstance(v, float)
                                                                                    else str(v))
        out.append(f"  {key}: {text}")
    return "\n".join(out) + "\n"


def _args(argv: Sequence[str]) -> Tuple[Path, Dict[str, str]]:
    pos = [a for a in argv if "=" not in a]
    kv = dict(a.split("=", 1) for a in argv if "=" in a)
    unknown = sorted(set(kv) - {"name", "out", "low_load", "downtime", "force"})
    if len(pos) != 1 or unknown or "name" not in kv:
        raise ProfileError(f"{USAGE}" + (f" (unknown: {', '.join(unknown)})" if unknown else ""))
    if not re.fullmatch(r"[A-Za-z0-9_]+", kv["name"]):
        raise ProfileError(f"name: letters, digits and _ only, got {kv['name']!r}")
    return Path(pos[0]), kv


def main(argv: Sequence[str]) -> int:
    try:
        root, kv = _args(argv)
        try:
            low_load = float(kv.get("low_load", LOW_LOAD))
        except ValueError:
            raise ProfileError(f"low_load: a number in (0, 1], got {kv['low_load']!r}") from None
        if not 0 < low_load <= 1:
            raise ProfileError(f"low_load: a number in (0, 1], got {low_load:g}")
        downtime = kv.get("downtime", "rescale")
        if downtime not in ("rescale", "stop", "split"):
            raise ProfileError(f"downtime: rescale, stop or split, got {downtime!r}")
        target = target_argument(kv)
        m = measure(root, low_load)
        text = profile_yaml(m, kv["name"], downtime)
        path = target.write(text)
    except (ProfileError, ConfigError) as exc:
        print(f"engine-profile: {exc}", file=sys.stderr)
        return 2
    print(text, end="")
    print(f"wrote {path}", file=sys.stderr)
    return 0
