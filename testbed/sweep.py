"""`testbed sweep`: an evaluation over a grid of overrides, resumable, on processes or on Spark.

    testbed sweep [OVERRIDES...] [executor=local|spark] [workers=N] [spark.master=URL] [spark.conf.K=V]

Overrides use Hydra's syntax, sweeps included (`policies.btu.scaling_threshold=80,100`,
`billing.btu_minutes=range(10,70,20)`, `pattern=stepwise,two_level`); their cartesian product gives
the sweep's points, and each point runs its evaluation's configurations and repetitions. A run's
folder is `OUT/runs/<digest>`, the digest of its resolved configuration (what the simulator sees,
its seed and its repetition): the same run has the same folder whichever executor ran it and in
whichever order, so a rerun skips what is complete and runs only what is missing or failed.

A run is written into `OUT/.staging/` and renamed into place when it ends (complete or not): a
retried or duplicated task never leaves a half-written run folder, and the first finished attempt
wins. `OUT/sweep.csv` lists every run of the sweep (digest, point, configuration label, status);
`testbed report OUT` reports the sweep (each point's configurations are labelled with its swept
values). See docs/sweeps.md.
"""
from __future__ import annotations

import csv
import hashlib
import itertools
import json
import os
import shutil
import sys
import threading
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from testbed import runs_folder
from testbed.backend_registry import backend_entry
from testbed.config import ConfigError, ExperimentConfig, to_plain
from testbed.eventlog import EventLogError, read_manifest
from testbed.progress import Outcome, Progress

if TYPE_CHECKING:  # imported where used: a sweep's import stays light
    from reporting.report_config import SparkConfig
    from testbed.experiment import RunSpec

STAGING, RUNS, INDEX = ".staging", "runs", "sweep.csv"
EXECUTORS = ("local", "spark")
# keys of a resolved config that do not change what a run computes
NOT_RUN_SETTINGS = ("out", "workers", "summary", "mix", "reps")


@dataclass(frozen=True)
class SweepRun:
    digest: str
    point: Tuple[str, ...]  # the overrides of its point of the grid
    cfg: ExperimentConfig  # the point's experiment config (out = the sweep's folder)
    # testbed.experiment.RunSpec: run_dir = OUT/runs/<digest>, label = its configuration as the
    # report names it, <configuration>[<swept values>]
    spec: "RunSpec"


@dataclass(frozen=True)
class SweepOptions:
    executor: str = "local"
    workers: int = 0  # local: parallel processes (0 = one per core)
    spark: Optional["SparkConfig"] = None


# -- the grid ------------------------------------------------------------------------------------
def expand(overrides: Sequence[str]) -> List[Tuple[str, ...]]:
    """The grid's points: the cartesian product of the sweep overrides' values, in Hydra's order
    (as its basic sweeper expands `-m`), each point a tuple of plain overrides. ConfigError naming
    the key for an override Hydra cannot parse or a sweep without values (an empty grid)."""
    return [tuple(p) for p in itertools.product(*(_choices(o) for o in overrides))]


def _choices(override: str) -> List[str]:
    """One override's values as plain overrides (one, or a sweep's several)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    key = override.partition("=")[0].lstrip("+~") or override
    try:
        parsed = OverridesParser.create().parse_overrides([override])[0]
        if not parsed.is_sweep_override():
            assert parsed.input_line is not None  # the parser keeps the line it parsed
            return [parsed.input_line]
        values = [f"{parsed.get_key_element()}={v}" for v in parsed.sweep_string_iterator()]
    except (HydraException, ValueError) as exc:  # Hydra's grammar errors, range(a, b, 0)
        reason = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip() and "hydra.cc" not in line)
        raise ConfigError(key, f"cannot parse {override!r}: {reason}") from None
    if not values:
        raise ConfigError(key, f"{override!r} gives no values: the grid would be empty")
    return values


def swept_keys(points: Sequence[Tuple[str, ...]]) -> List[str]:
    """Keys whose value differs between points (they label a point's configurations)."""
    values: Dict[str, set] = {}
    for point in points:
        for o in point:
            key, _, value = o.partition("=")
            values.setdefault(key, set()).add(value)
    return [k for k, v in values.items() if len(v) > 1]


def compose(overrides: Sequence[str]) -> ExperimentConfig:
    """One point's typed and validated config (ConfigError naming the key, as `testbed experiment`)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from testbed.fidelity.evaluation import compose_experiment

    try:
        return compose_experiment(overrides)
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(" ".join(overrides) or "overrides", str(exc).splitlines()[0]) from None


def run_digest(run_cfg: ExperimentConfig, seed: int, rep: int) -> str:
    """A stable name for a run: its resolved config without what does not change its result."""
    plain = to_plain(run_cfg)
    for key in NOT_RUN_SETTINGS:
        plain.pop(key, None)
    plain["evaluation"].pop("only", None)
    text = json.dumps({"config": plain, "seed": seed, "rep": rep}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def plan_sweep(overrides: Sequence[str]) -> Tuple[Path, List[SweepRun]]:
    """The sweep's folder and its runs, every point's config checked before anything runs."""
    from testbed.experiment import config_for, plan_runs

    points = expand(overrides)
    labelled = swept_keys(points)
    runs: List[SweepRun] = []
    out: Optional[Path] = None
    for point in points:
        cfg = compose(point)
        if backend_entry(cfg.backend.name).shares_machine:
            raise ConfigError("backend", f"a sweep runs independent runs side by side; backend={cfg.backend.name}'s "
                                         f"share the machine: use experiment")
        folder = Path(cfg.out).resolve()
        if out is not None and folder != out:
            raise ConfigError("out", f"one sweep writes into one folder, not {out} and {folder}")
        out = folder
        cfg = replace(cfg, out=str(folder))
        swept = ",".join(o for o in point if o.partition("=")[0] in labelled and not o.startswith("pattern="))
        for spec in plan_runs(cfg):
            label = f"{spec.config}[{swept}]" if swept else spec.config
            digest = run_digest(config_for(cfg, spec), spec.seed, spec.rep)
            spec = replace(spec, label=label, run_dir=folder / RUNS / digest)
            runs.append(SweepRun(digest, point, cfg, spec))
    seen: Dict[str, SweepRun] = {}
    for run in runs:  # two points that resolve to the same run (e.g. a value equal to the default) run once
        seen.setdefault(run.digest, run)
    assert out is not None
    return out, list(seen.values())


# -- one run -------------------------------------------------------------------------------------
def status_of(run_dir: Path) -> Optional[str]:
    try:
        return read_manifest(run_dir).status
    except EventLogError:
        return None


def run_once(run: SweepRun) -> Outcome:
    """Run one sweep run unless it is complete: into a staging folder, then renamed into place."""
    from testbed.experiment import execute

    final = run.spec.run_dir
    if status_of(final) == "complete":
        return Outcome(run.digest, "skipped", 0.0)
    staging = final.parent.parent / STAGING / f"{run.digest}-{uuid.uuid4().hex[:8]}"
    t0 = time.perf_counter()
    error = ""
    try:
        execute(run.cfg, replace(run.spec, run_dir=staging))
    except Exception as exc:  # noqa: BLE001 - the run's manifest says incomplete; the sweep goes on
        error = f"{type(exc).__name__}: {exc}"
    status = status_of(staging) or "incomplete"
    _move_into_place(staging, final)
    return Outcome(run.digest, status_of(final) or status, time.perf_counter() - t0, error)


def _move_into_place(staging: Path, final: Path) -> None:
    """The first complete attempt wins; an incomplete run in place is replaced by a newer attempt."""
    final.parent.mkdir(parents=True, exist_ok=True)
    if status_of(final) == "complete":
        shutil.rmtree(staging, ignore_errors=True)
        return
    if final.exists():
        shutil.rmtree(final, ignore_errors=True)
    try:
        os.rename(staging, final)
    except OSError:  # another attempt renamed first
        shutil.rmtree(staging, ignore_errors=True)


# -- executors -----------------------------------------------------------------------------------
def _run_packed(run: SweepRun) -> Outcome:
    return run_once(run)


def run_local(runs: Sequence[SweepRun], workers: int, done: Callable[[Outcome], None]) -> None:
    workers = min(workers or os.cpu_count() or 1, max(1, len(runs)))
    if workers <= 1:
        for run in runs:
            done(run_once(run))
        return
    from testbed.experiment import pool_map

    for outcome in pool_map(_run_packed, runs, workers):
        done(outcome)


def _spark_task(packed: bytes) -> bytes:
    """A Spark task: one run (the config travels pickled; the worker has the project installed)."""
    import pickle

    return pickle.dumps(run_once(pickle.loads(packed)))


def run_spark(runs: Sequence[SweepRun], spark_cfg: Any, done: Callable[[Outcome], None]) -> None:
    """One Spark task per run, no speculative copies (a retried task is safe: see `run_once`).
    While the job runs, runs are reported as their folders complete; failures when it returns."""
    import pickle

    from reporting.spark_session import build_session, is_local

    if is_local(spark_cfg.master):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers import this project
    spark_cfg = replace(spark_cfg, app_name="testbed-sweep",
                        conf={"spark.speculation": "false", "spark.task.maxFailures": "4",
                              "spark.pyspark.python": os.environ.get("PYSPARK_PYTHON", sys.executable),
                              **spark_cfg.conf})
    reported: set = set()
    lock = threading.Lock()

    def report(outcome: Outcome) -> None:
        with lock:
            if outcome.name not in reported:
                reported.add(outcome.name)
                done(outcome)

    started = time.time()
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(2.0):
            for r in runs:
                manifest = r.spec.run_dir / "manifest.json"
                if r.digest not in reported and manifest.is_file() and manifest.stat().st_mtime >= started \
                        and status_of(r.spec.run_dir) == "complete":
                    report(Outcome(r.digest, "complete", 0.0))

    session = build_session(spark_cfg)
    poller = threading.Thread(target=poll, name="sweep-progress", daemon=True)
    try:
        packed = [pickle.dumps(r) for r in runs]
        rdd = session.sparkContext.parallelize(packed, numSlices=max(1, len(packed)))
        poller.start()
        outcomes = [pickle.loads(b) for b in rdd.map(_spark_task).collect()]
    finally:
        stop.set()
        if poller.is_alive():
            poller.join()
        session.stop()
    for outcome in outcomes:
        report(outcome)


def write_index(out: Path, runs: Sequence[SweepRun]) -> Path:
    path = out / INDEX
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["digest", "pattern", "configuration", "rep", "seed", "point", "status"])
        for r in runs:
            w.writerow([r.digest, r.spec.pattern, r.spec.label, r.spec.rep, r.spec.seed, " ".join(r.point),
                        status_of(r.spec.run_dir) or "missing"])
    return path


def run_sweep(overrides: Sequence[str], options: SweepOptions) -> Dict[str, int]:
    """Plan (every point checked), lock the folder, run what is not complete, write the index."""
    out, runs = plan_sweep(overrides)
    runs_folder.prepare(str(out))
    with runs_folder.locked(out):
        shutil.rmtree(out / STAGING, ignore_errors=True)  # attempts of an interrupted sweep
        todo = [r for r in runs if status_of(r.spec.run_dir) != "complete"]
        print(f"sweep: {len(runs)} run(s) into {out}/{RUNS} ({len(runs) - len(todo)} already complete), "
              f"executor {options.executor}", file=sys.stderr)
        progress = Progress(len(todo))
        try:
            if options.executor == "spark":
                run_spark(todo, options.spark, progress)
            else:
                run_local(todo, options.workers, progress)
        finally:
            write_index(out, runs)
            shutil.rmtree(out / STAGING, ignore_errors=True)
    return dict(progress.counts, total=len(runs))


def parse_options(argv: Iterable[str]) -> Tuple[List[str], SweepOptions]:
    """Split the sweep's own options from the Hydra overrides."""
    from reporting.report_config import ReportConfigError, parse_overrides

    overrides, spark_args = [], []
    executor, workers = "local", 0
    for arg in argv:
        key, sep, value = arg.partition("=")
        if key == "executor" and sep:
            if value not in EXECUTORS:
                raise ConfigError("executor", f"must be one of {', '.join(EXECUTORS)}, got {value!r}")
            executor = value
        elif key == "workers" and sep:
            try:
                workers = int(value)
            except ValueError:
                raise ConfigError("workers", f"must be an integer, got {value!r}") from None
            if workers < 0:
                raise ConfigError("workers", "must be >= 0")
        elif key.startswith("spark.") and sep:
            spark_args.append(arg)
        else:
            overrides.append(arg)
    try:
        spark = parse_overrides(spark_args).spark
    except ReportConfigError as exc:
        raise ConfigError("spark", str(exc)) from None
    return overrides, SweepOptions(executor, workers, spark)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        return 0
    try:
        overrides, options = parse_options(args)
        counts = run_sweep(overrides, options)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("sweep interrupted: rerun the same command to run what is missing", file=sys.stderr)
        return 130
    print(f"sweep: {counts['complete']} run(s) done, {counts['incomplete']} failed, "
          f"{counts['skipped']} already complete, of {counts['total']}")
    return 1 if counts["incomplete"] else 0
