"""An experiment: the matrix of runs a config asks for, each run executed into its event-log folder."""
from __future__ import annotations

import copy
import multiprocessing
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from testbed import runs_folder
from testbed.backend_registry import RunInputs, backend_entry
from testbed.config import (
    BillingMode,
    ConfigError,
    ExperimentConfig,
    RunConfiguration,
    measurement_settings,
    placement_config,
    policy_params,
    runtime_config,
    to_plain,
)
from testbed.eventlog import (
    TABLES,
    EventLog,
    EventLogError,
    Manifest,
    code_revision,
    finish_manifest,
    package_versions,
    read_manifest,
    run_dir_for,
    utc_now,
    write_manifest,
)
from testbed.model import LeaseHost
from testbed.monitoring import Observer, SnapshotSettings
from testbed.placement.base import make_placement
from testbed.policies.base import initial_deployment
from testbed.policies.registry import Policy, make_policy, policy_entry
from testbed.progress import Outcome, Progress
from testbed.rng import stream
from testbed.topology import Topology
from testbed.workloads.patterns import Pattern, PatternConfig, make_pattern
from testbed.workloads.registry import workload_details


@dataclass(frozen=True)
class RunSpec:
    pattern: str
    config: str  # threshold | btu-10 | ... (live runs: threshold-live, btu-10-live): the folder name
    policy: str
    btu_minutes: int
    rep: int  # 1-based
    seed: int  # of this run; the same for every configuration of one repetition
    run_dir: Path
    settings: str = ""  # the experiment's settings digest (testbed/runs_folder.py), computed once
    label: str = ""  # the configuration's name in the manifest when not `config` (a sweep point's)

    @property
    def run_id(self) -> str:
        return f"{self.pattern}/{self.label or self.config}/{self.rep}"


def run_seed(seed: int, rep: int) -> int:
    """Repetition r of every configuration shares its seed: configurations see the same randomness."""
    return int(np.random.SeedSequence([seed, rep]).generate_state(1)[0])


def configurations(cfg: ExperimentConfig) -> List[RunConfiguration]:
    """The configurations an experiment runs: the evaluation's, or the one policy `policy=` names
    (named <policy>-<BTU minutes> if it bills by its own BTU, else <policy>)."""
    if cfg.policy.name == "matrix":
        only = cfg.evaluation.only
        return [c for c in cfg.evaluation.configurations if not only or c.name in only]
    entry = policy_entry(cfg.policy.name)
    billing = BillingMode(entry.billing)
    name = f"{entry.name}-{cfg.billing.btu_minutes}" if billing == BillingMode.own else entry.name
    return [RunConfiguration(name=name, policy=entry.name, billing=billing)]


def initial_hosts(cfg: ExperimentConfig) -> int:
    """Hosts the initial deployment leases: testbed.policies.base.initial_deployment on an empty cloud."""
    topology = Topology.from_config(cfg.topology)
    empty = Observer(topology, SnapshotSettings.from_config(cfg, cfg.billing.btu_minutes * 60.0), 1,
                     cfg.runtime.monitoring_s).snapshot(0.0, (), (), {})
    return sum(isinstance(a, LeaseHost) for a in initial_deployment(empty, cfg.runtime.initial_instances))


def check_initial_deployment(cfg: ExperimentConfig) -> None:
    """The initial deployment must fit within infrastructure.max_hosts; ConfigError naming
    runtime.initial_instances otherwise. A relation between keys that testbed.config.validate cannot
    check without the topology, the snapshot and the policies' deployment, so the runs are checked
    here, when they are planned, before anything starts."""
    hosts = initial_hosts(cfg)
    if hosts > cfg.infrastructure.max_hosts:
        raise ConfigError("runtime.initial_instances", f"the initial deployment ({cfg.runtime.initial_instances} per "
                                                       f"operator) needs {hosts} hosts, more than "
                                                       f"infrastructure.max_hosts ({cfg.infrastructure.max_hosts})")


def plan_runs(cfg: ExperimentConfig) -> List[RunSpec]:
    """The runs of a validated config, after the check of its initial deployment (ConfigError)."""
    check_initial_deployment(cfg)
    runs, settings, backend = [], runs_folder.settings_digest(cfg), backend_entry(cfg.backend.name)
    for conf in configurations(cfg):
        name = backend.folder_name(conf.name)  # a real engine's runs beside the simulated ones
        btu = conf.btu_minutes if conf.btu_minutes is not None else cfg.billing.btu_minutes
        for rep in range(1, cfg.reps + 1):
            runs.append(RunSpec(cfg.pattern.name, name, conf.policy, btu, rep, run_seed(cfg.seed, rep),
                                run_dir_for(cfg.out, cfg.pattern.name, name, rep), settings))
    return runs


def configuration_of(cfg: ExperimentConfig, spec: RunSpec) -> RunConfiguration:
    backend = backend_entry(cfg.backend.name)
    return next(c for c in configurations(cfg) if backend.folder_name(c.name) == spec.config)


def config_for(cfg: ExperimentConfig, spec: RunSpec) -> ExperimentConfig:
    """The resolved config of one run: one configuration (policy, its parameters, placement), one BTU length."""
    conf = configuration_of(cfg, spec)
    run_cfg = copy.deepcopy(cfg)
    run_cfg.policy.name = conf.policy
    run_cfg.policies = {conf.policy: policy_params(cfg, conf.policy, conf.params)}
    if conf.placement_params:
        run_cfg.placement = placement_config(cfg, conf.placement_params)
    if conf.runtime:
        run_cfg.runtime = runtime_config(cfg, conf.runtime)
    run_cfg.placement.name = conf.placement or cfg.placement.name or policy_entry(conf.policy).placement
    run_cfg.evaluation.configurations = [conf]
    run_cfg.billing.btu_minutes = spec.btu_minutes
    # load_scale is applied here, once: the run's resolved config holds the effective tick
    run_cfg.topology.tick_ms = cfg.topology.tick_ms / cfg.load_scale
    run_cfg.load_scale = 1.0
    if run_cfg.job.enabled and time_compression(run_cfg) != 1:
        # job mode on a real engine: the config's times are the paper's, compressed here (recorded as resolved)
        from testbed.live.job_compression import compress_config

        compress_config(run_cfg, time_compression(run_cfg))
    return run_cfg


def time_compression(run_cfg: ExperimentConfig) -> float:
    """f of a job-mode run: what its backend divides the configured times by (1: none)."""
    return backend_entry(run_cfg.backend.name).backend.time_compression(run_cfg)


def policy_for(run_cfg: ExperimentConfig) -> Policy:
    """The policy object of a run (from `config_for`'s resolved config)."""
    name = run_cfg.policy.name
    placement = make_placement(run_cfg.placement.name, run_cfg.placement)
    placement.bind_run(run_cfg)
    return make_policy(name, run_cfg.policies[name], placement)


def build_pattern(pattern: PatternConfig, seed: int) -> Pattern:
    """The pattern of an experiment: a random walk is drawn once per experiment seed, so every
    configuration and repetition sees the same load."""
    return make_pattern(pattern, stream(seed + pattern.seed_offset, "pattern"))


def _clear(run_dir: Path) -> None:
    """Remove a previous run's files from the folder (only files the event log writes)."""
    for name in [*(f"{t}.parquet" for t in TABLES), "manifest.json"]:
        (run_dir / name).unlink(missing_ok=True)


def execute(cfg: ExperimentConfig, spec: RunSpec) -> Path:
    """One run into its folder, by the config's backend. Whatever stops it, the manifest says complete
    or incomplete."""
    run_cfg = config_for(cfg, spec)
    spec.run_dir.mkdir(parents=True, exist_ok=True)
    _clear(spec.run_dir)
    pattern_seed = cfg.seed + cfg.pattern.seed_offset  # see build_pattern
    write_manifest(spec.run_dir, Manifest(
        run_id=spec.run_id, experiment=cfg.evaluation.name, pattern=spec.pattern,
        config=spec.label or spec.config, policy=spec.policy, btu_minutes=spec.btu_minutes, rep=spec.rep,
        billing=run_cfg.evaluation.configurations[0].billing.value, settings_digest=spec.settings,
        seed=spec.seed, seeds={"run": spec.seed, "pattern": pattern_seed}, backend=cfg.backend.name,
        resolved_config=to_plain(run_cfg), code_revision=code_revision(), versions=package_versions(),
        started_at=utc_now(), status="running", details=measurement_settings(run_cfg),
    ))
    try:
        pattern = build_pattern(run_cfg.pattern, cfg.seed)
        result = backend_entry(run_cfg.backend.name).backend.run(RunInputs(
            run_cfg, policy_for(run_cfg), pattern, spec.seed, spec.btu_minutes, spec.run_id, spec.run_dir))
        log = EventLog(spec.run_dir)
        for table, columns in sorted(result.tables.items()):
            log.write(table, columns)
    except BaseException as exc:  # KeyboardInterrupt included: the run must be marked incomplete
        finish_manifest(spec.run_dir, "incomplete", error=failure_reason(exc))
        raise
    if result.incomplete:
        print(f"run {spec.run_id}: incomplete: {result.incomplete}", file=sys.stderr, flush=True)
    finish_manifest(spec.run_dir, "incomplete" if result.incomplete else "complete", error=result.incomplete,
                    sim_duration_s=result.duration_s, details={**workload_details(pattern), **result.details})
    return spec.run_dir


def failure_reason(exc: BaseException) -> str:
    """The manifest's error for what stopped a run: `interrupted (SIGINT)` for Ctrl-C (and the signal
    `_interrupt` names for SIGTERM), else the exception's type and message."""
    if isinstance(exc, KeyboardInterrupt):
        return f"interrupted ({exc.args[0] if exc.args and exc.args[0] else 'SIGINT'})"
    return f"{type(exc).__name__}: {exc}"


def incomplete_runs(paths: Sequence[Path]) -> List[Tuple[Path, str]]:
    """(run folder, reason) of the runs whose manifest says incomplete."""
    found = []
    for path in paths:
        manifest = read_manifest(path)
        if manifest.status != "complete":
            found.append((path, manifest.error or manifest.status))
    return found


def _execute_packed(args) -> Tuple[RunSpec, Path, float, str]:
    t0 = time.perf_counter()
    path = execute(*args)
    return args[1], path, time.perf_counter() - t0, read_manifest(path).status


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _worker_init() -> None:
    # Pool.terminate() sends SIGTERM: turn it into an interrupt so the run is marked incomplete.
    signal.signal(signal.SIGTERM, _interrupt)


def run_experiment(cfg: ExperimentConfig) -> List[Path]:
    """All runs of the config; in parallel over `workers` processes (0 = one per core). The runs are
    planned (the initial deployment checked), then the runs folder is checked and locked, before
    anything runs. On Ctrl-C or SIGTERM, running runs are marked
    incomplete and queued ones never start."""
    specs = plan_runs(cfg)
    runs_folder.check_run_dirs(Path(cfg.out), [s.run_dir for s in specs])
    out = runs_folder.prepare(cfg.out)
    with runs_folder.locked(out):
        runs_folder.check_settings(out / cfg.pattern.name, specs[0].settings, cfg.mix)
        try:
            return _run_all(cfg, specs)
        except BaseException:
            _mark_interrupted(specs)
            raise


def pool_map(fn: Callable, items: Sequence, workers: int, initializer: Optional[Callable] = None) -> Iterator:
    """fn(item) for every item on `workers` forked processes, yielded as they finish; on an
    interrupt (or when the caller stops iterating) the pool is stopped with a bound (`stop_pool`)."""
    pool = multiprocessing.get_context("fork").Pool(workers, initializer=initializer)
    try:
        yield from pool.imap_unordered(fn, items)
    except BaseException:
        stop_pool(pool)
        raise
    pool.close()
    pool.join()


def stop_pool(pool, grace_s: float = 30.0) -> None:
    """Stop a worker pool after an interrupt without hanging. Pool.terminate sends SIGTERM (a
    worker marks its run incomplete) and joins; but it first takes the task queue's lock, which a
    worker that died holding it never gives back, and then it waits forever. So it runs in a
    thread, and after `grace_s` (enough to write a manifest on a busy machine) the remaining
    workers are killed and the parent goes on: it settles every manifest left running."""
    stopper = threading.Thread(target=pool.terminate, name="pool-terminate", daemon=True)
    stopper.start()
    stopper.join(grace_s)
    if stopper.is_alive():
        for child in multiprocessing.active_children():
            child.kill()


def _mark_interrupted(specs: List[RunSpec]) -> None:
    """A worker stopped while it wrote its manifest may leave it 'running': the parent settles it."""
    for spec in specs:
        try:
            if read_manifest(spec.run_dir).status == "running":
                finish_manifest(spec.run_dir, "incomplete", error="interrupted")
        except EventLogError:
            continue  # never started, or no manifest to settle


def _run_all(cfg: ExperimentConfig, specs: List[RunSpec]) -> List[Path]:
    workers = min(cfg.workers or os.cpu_count() or 1, len(specs))
    if backend_entry(cfg.backend.name).shares_machine:
        workers = 1  # runs on the machine's engine, broker and cores: one at a time
    print(f"{len(specs)} run(s) of pattern {cfg.pattern.name} into {cfg.out}/ with {workers} worker(s)",
          file=sys.stderr)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    progress = Progress(len(specs), what="experiment")
    try:
        items = [(cfg, s) for s in specs]
        results = map(_execute_packed,
                      items) if workers <= 1 else pool_map(_execute_packed, items, workers, _worker_init)
        done = {}
        for spec, path, seconds, status in results:
            progress(Outcome(spec.run_id, status, seconds))
            done[spec.run_dir] = path
        return [done[s.run_dir] for s in specs]
    finally:
        signal.signal(signal.SIGTERM, previous)
