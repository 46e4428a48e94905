"""An experiment: the matrix of runs a config asks for, each run executed into its event-log folder."""
from __future__ import annotations

import copy
import multiprocessing
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List

import numpy as np

from data_provider.patterns import Pattern, PatternConfig, make_pattern
from testbed.config import BackendName, ExperimentConfig, PolicyName, to_plain
from testbed.eventlog import (
    TABLES,
    EventLog,
    Manifest,
    code_revision,
    finish_manifest,
    package_versions,
    run_dir_for,
    utc_now,
    write_manifest,
)
from testbed.policies.base import make_policy
from testbed.rng import stream


@dataclass(frozen=True)
class RunSpec:
    pattern: str
    config: str  # threshold | btu-10 | ... (live runs: threshold-live, btu-10-live): the folder name
    policy: PolicyName
    btu_minutes: int
    rep: int  # 1-based
    seed: int  # of this run; the same for every configuration of one repetition
    run_dir: Path


def run_seed(seed: int, rep: int) -> int:
    """Repetition r of every configuration shares its seed: configurations see the same randomness."""
    return int(np.random.SeedSequence([seed, rep]).generate_state(1)[0])


def plan_runs(cfg: ExperimentConfig) -> List[RunSpec]:
    if cfg.policy.name == PolicyName.matrix:
        configs = [("threshold", PolicyName.threshold, cfg.billing.btu_minutes)] + [
            (f"btu-{m}", PolicyName.btu, m) for m in cfg.policy.matrix_btu_minutes
        ]
    elif cfg.policy.name == PolicyName.btu:
        configs = [(f"btu-{cfg.billing.btu_minutes}", PolicyName.btu, cfg.billing.btu_minutes)]
    else:
        configs = [(cfg.policy.name.value, cfg.policy.name, cfg.billing.btu_minutes)]
    if cfg.backend.name == BackendName.docker:  # live runs sit beside simulated ones in one report
        configs = [(f"{name}-live", policy, btu) for name, policy, btu in configs]
    return [
        RunSpec(cfg.pattern.name, name, policy, btu, rep, run_seed(cfg.seed, rep),
                run_dir_for(cfg.out, cfg.pattern.name, name, rep))
        for name, policy, btu in configs
        for rep in range(1, cfg.reps + 1)
    ]


def config_for(cfg: ExperimentConfig, spec: RunSpec) -> ExperimentConfig:
    """The resolved config of one run: one policy, one BTU length."""
    run_cfg = copy.deepcopy(cfg)
    run_cfg.policy.name = spec.policy
    run_cfg.billing.btu_minutes = spec.btu_minutes
    # load_scale is applied here, once: the run's resolved config holds the effective tick
    run_cfg.topology.tick_ms = cfg.topology.tick_ms / cfg.load_scale
    run_cfg.load_scale = 1.0
    return run_cfg


def build_pattern(pattern: PatternConfig, seed: int) -> Pattern:
    """The pattern of an experiment: a random walk is drawn once per experiment seed, so every
    configuration and repetition sees the same load."""
    return make_pattern(pattern, stream(seed + pattern.seed_offset, "pattern"))


def _clear(run_dir: Path) -> None:
    """Remove a previous run's files from the folder (only files the event log writes)."""
    for name in [*(f"{t}.parquet" for t in TABLES), "manifest.json"]:
        (run_dir / name).unlink(missing_ok=True)


def execute(cfg: ExperimentConfig, spec: RunSpec) -> Path:
    """One run into its folder. Whatever stops it, the manifest says complete or incomplete."""
    from testbed.sim.simulator import Simulation

    run_cfg = config_for(cfg, spec)
    spec.run_dir.mkdir(parents=True, exist_ok=True)
    _clear(spec.run_dir)
    pattern_seed = cfg.seed + cfg.pattern.seed_offset  # see build_pattern
    write_manifest(spec.run_dir, Manifest(
        run_id=f"{spec.pattern}/{spec.config}/{spec.rep}", experiment=cfg.experiment, pattern=spec.pattern,
        config=spec.config, policy=spec.policy.value, btu_minutes=spec.btu_minutes, rep=spec.rep,
        seed=spec.seed, seeds={"run": spec.seed, "pattern": pattern_seed}, backend=cfg.backend.name.value,
        resolved_config=to_plain(run_cfg), code_revision=code_revision(), versions=package_versions(),
        started_at=utc_now(), status="running",
    ))
    try:
        pattern = build_pattern(run_cfg.pattern, cfg.seed)
        policy = make_policy(run_cfg.policy)
        if run_cfg.backend.name == BackendName.docker:
            from testbed.live.run import LiveRun

            result = LiveRun(run_cfg, policy, pattern, spec.seed, spec.btu_minutes,
                             f"{spec.pattern}/{spec.config}/{spec.rep}", spec.run_dir).run()
        else:
            result = Simulation(run_cfg, policy, pattern, spec.seed, spec.btu_minutes).run()
        log = EventLog(spec.run_dir)
        for table, columns in sorted(result.tables.items()):
            log.write(table, columns)
    except BaseException as exc:  # KeyboardInterrupt included: the run must be marked incomplete
        finish_manifest(spec.run_dir, "incomplete", error=f"{type(exc).__name__}: {exc}")
        raise
    finish_manifest(spec.run_dir, "complete", sim_duration_s=result.duration_s,
                    details=result.details)
    return spec.run_dir


def _execute_packed(args) -> Path:
    return execute(*args)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _worker_init() -> None:
    # Pool.terminate() sends SIGTERM: turn it into an interrupt so the run is marked incomplete.
    signal.signal(signal.SIGTERM, _interrupt)


def run_experiment(cfg: ExperimentConfig) -> List[Path]:
    """All runs of the config; in parallel over `workers` processes (0 = one per core). On Ctrl-C
    or SIGTERM, running runs are marked incomplete and queued ones never start."""
    specs = plan_runs(cfg)
    workers = min(cfg.workers or os.cpu_count() or 1, len(specs))
    if cfg.backend.name == BackendName.docker:
        workers = 1  # live runs share the machine's engine, broker and cores: one at a time
    print(f"{len(specs)} run(s) of pattern {cfg.pattern.name} into {cfg.out}/ with {workers} worker(s)", file=sys.stderr)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        if workers <= 1:
            return [execute(cfg, s) for s in specs]
        pool = multiprocessing.get_context("fork").Pool(workers, initializer=_worker_init)
        try:
            return list(pool.imap(_execute_packed, [(cfg, s) for s in specs]))
        except BaseException:
            pool.terminate()
            raise
        finally:
            pool.close()
            pool.join()
    finally:
        signal.signal(signal.SIGTERM, previous)
