"""`testbed calibrate`: a seeded, budgeted search of the simulator's unknowns on ONE workload.

The evaluation declares the search (`evaluation.fidelity` in its YAML; testbed.fidelity_spec): the
parameters and their bounds, the values measured elsewhere, the cell kinds and the workload the
search sees. The search (optuna's TPE sampler, sequential, seeded) starts from the base profile's
own values and minimises the distance of that workload's runs to its published cells only. The best
assignment is written as a Hydra profile (base profile + measured + calibrated values) and the
search's record (every trial, the best trial's cell gaps, the wall time) beside it. Same seed and
budget give the same profile.

    testbed calibrate                                  # the BTU paper's loop on stepwise
    testbed calibrate evaluation=daedalus budget=40    # Daedalus on wc_sine
"""
from __future__ import annotations

import json
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, TextIO, Tuple

import optuna
import pandas as pd
from omegaconf import OmegaConf

from testbed.arguments import config_error, parse_arguments, parse_command
from testbed.config import CONF_DIR, ConfigError, ExperimentConfig
from testbed.fidelity.evaluation import Loop, compose_experiment, evaluate
from testbed.fidelity.parameters import config_values, current_values, round3
from testbed.fidelity.profile_file import ProfileTarget
from testbed.fidelity_spec import FidelityParameter

RECORD_DIR = CONF_DIR.parent / "calibration"


@dataclass
class CalibrationConfig:
    """Unset values (None) come from the evaluation's `evaluation.fidelity`."""

    evaluation: str = "btu"  # whose fidelity loop: its parameters, cells and published table
    pattern: Optional[str] = None  # the only workload whose published cells the search sees
    budget: Optional[int] = None  # trials (each runs the evaluation's configurations on the workload)
    seed: int = 1  # of the sampler and of the runs
    reps: Optional[int] = None  # repetitions per trial (common random numbers: the same seeds in every trial)
    base_profile: Optional[str] = None  # the profile the values are added to
    name: Optional[str] = None  # the profile written: <conf_dir>/profile/<name>.yaml
    duration_min: Optional[float] = None
    startup_trials: Optional[int] = None  # random trials before TPE models the distance
    conf_dir: str = str(CONF_DIR)
    record_dir: str = str(RECORD_DIR)  # <name>.record.csv (trials) and <name>.record.json
    force: bool = False  # replace an existing profile and record of that name (never a shipped one)

    def validate(self) -> "CalibrationConfig":
        for key in ("budget", "reps", "duration_min"):
            if getattr(self, key) is not None and not getattr(self, key) > 0:
                raise ConfigError(key, f"must be > 0, got {getattr(self, key)}")
        if self.startup_trials is not None and self.startup_trials < 0:
            raise ConfigError("startup_trials", "must be >= 0")
        if not 0 <= self.seed <= 2**32 - 1:  # optuna's sampler seeds numpy's legacy RandomState
            raise ConfigError("seed", f"must be an integer in [0, 2**32 - 1], got {self.seed}")
        profiles = Path(self.conf_dir) / "profile"
        if self.base_profile is not None and not (profiles / f"{self.base_profile}.yaml").is_file():
            raise ConfigError("base_profile", f"no profile {self.base_profile!r} in {self.conf_dir}/profile")
        if self.name is not None and not self.name.isidentifier():
            raise ConfigError("name", f"must be a plain name, got {self.name!r}")
        if self.name is not None and self.name == self.base_profile:
            raise ConfigError("name", "must differ from base_profile")
        return self

    def resolve(self, loop: Loop) -> "CalibrationConfig":
        """Every unset value from the evaluation's fidelity loop."""
        spec = loop.spec
        done = replace(self, pattern=self.pattern or spec.calibrate_on, budget=self.budget or spec.budget,
                       reps=self.reps or spec.reps, base_profile=self.base_profile or spec.base_profile,
                       name=self.name or spec.profile, duration_min=self.duration_min or loop.duration_min,
                       startup_trials=spec.startup_trials if self.startup_trials is None else self.startup_trials)
        done.validate()
        workloads = [spec.calibrate_on, *(w for e, w in spec.workloads() if not e)]
        if done.pattern not in workloads:
            raise ConfigError("pattern", f"{done.pattern!r} is not a workload of evaluation {self.evaluation!r}: "
                                         f"{workloads}")
        return done

    def targets(self) -> Tuple[ProfileTarget, ProfileTarget, ProfileTarget]:
        """The profile and the search's record (csv, json), of a resolved config."""
        records = Path(self.record_dir)
        return (ProfileTarget(Path(self.conf_dir) / "profile" / f"{self.name}.yaml", "name", self.force),
                ProfileTarget(records / f"{self.name}.record.csv", "name", self.force),
                ProfileTarget(records / f"{self.name}.record.json", "name", self.force))


def parse_config(args: Sequence[str]) -> CalibrationConfig:
    """key=value arguments -> CalibrationConfig; an unknown key or a bad value names the key."""
    return parse_arguments(CalibrationConfig, args).validate()


@dataclass
class Trial:
    number: int
    values: Dict[str, Any]
    distance: float
    within: int
    cells: int
    worst: str
    seconds: float


@dataclass(frozen=True)
class CalibrationPlan:
    """A search checked before it starts: its resolved settings, the loop its trials run (with the
    search's duration) and the base profile on the calibration workload."""

    config: CalibrationConfig
    loop: Loop
    base: ExperimentConfig


def plan_calibration(cfg: CalibrationConfig) -> CalibrationPlan:
    """Every setting resolved and checked as an experiment would check it (duration_min and reps
    included), and the files the search will write; ConfigError naming the key otherwise."""
    loop = Loop.load(cfg.evaluation, Path(cfg.conf_dir))
    cfg = cfg.resolve(loop)
    base = compose_experiment([f"evaluation={cfg.evaluation}", f"pattern={cfg.pattern}",
                               f"profile={cfg.base_profile}", f"duration_min={cfg.duration_min}",
                               f"reps={cfg.reps}"], Path(cfg.conf_dir))
    for target in cfg.targets():
        target.check()
    return CalibrationPlan(cfg, replace(loop, duration_min=float(cfg.duration_min or loop.duration_min)), base)


@dataclass
class CalibrationResult:
    config: CalibrationConfig
    loop: Loop
    best: Trial
    trials: List[Trial]
    gaps: pd.DataFrame  # the best trial's cells
    wall_time_s: float
    profile_path: Path
    record_paths: List[Path] = field(default_factory=list)


def _suggest(trial: optuna.Trial, space: Sequence[FidelityParameter]) -> Dict[str, Any]:
    values: Dict[str, Any] = {}
    for p in space:
        if p.kind == "categorical":
            values[p.name] = trial.suggest_categorical(p.name, list(p.choices))
        elif p.kind == "int":
            values[p.name] = trial.suggest_int(p.name, int(p.low), int(p.high))
        else:
            values[p.name] = round3(trial.suggest_float(p.name, p.low, p.high, log=p.kind == "log_float"))
    return values


def calibrate(cfg: CalibrationConfig, log: Optional[TextIO] = None) -> CalibrationResult:
    """Check the settings (ConfigError before anything runs), run the search and write the profile
    and its record."""
    return search(plan_calibration(cfg), log)


def search(plan: CalibrationPlan, log: Optional[TextIO] = None) -> CalibrationResult:
    """Run a checked search and write the profile and its record."""
    cfg, loop, base = plan.config, plan.loop, plan.base
    assert cfg.pattern and cfg.base_profile and cfg.budget and cfg.reps and cfg.startup_trials is not None
    space = loop.spec.parameters
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # multivariate TPE
    sampler = optuna.samplers.TPESampler(seed=cfg.seed, n_startup_trials=cfg.startup_trials, multivariate=True)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    study.enqueue_trial(current_values(base, space))  # the base profile's own estimates first
    trials: List[Trial] = []
    summaries: Dict[int, pd.DataFrame] = {}  # per trial number: the best trial's cells come from it
    started = time.perf_counter()

    def objective(trial: optuna.Trial) -> float:
        t0 = time.perf_counter()
        values = _suggest(trial, space)
        setting = loop.calibration_setting(cfg.pattern or "", cfg.base_profile or "", cfg.reps or 1, cfg.seed, values)
        summaries[trial.number], d = evaluate(setting, loop)
        trials.append(Trial(trial.number, values, d.value, d.within, d.cells,
                            f"{d.worst_metric} {d.worst_config}", time.perf_counter() - t0))
        if log:
            _progress(log, trials, cfg.budget or 0, started)
        return d.value

    study.optimize(objective, n_trials=cfg.budget)
    best = min(trials, key=lambda t: (t.distance, t.number))
    gaps = loop.cells(summaries[best.number], cfg.pattern)
    if loop.spec.calibrate_configs:
        gaps = gaps[gaps["approach"].isin(loop.spec.calibrate_configs)]
    wall = time.perf_counter() - started
    profile_path = write_profile(cfg, loop, best)
    result = CalibrationResult(cfg, loop, best, trials, gaps, wall, profile_path)
    result.record_paths = write_record(result)
    return result


def _progress(log: TextIO, trials: Sequence[Trial], budget: int, started: float) -> None:
    d, best = trials[-1], min(t.distance for t in trials)
    elapsed = time.perf_counter() - started
    left = elapsed / len(trials) * (budget - len(trials))
    print(f"trial {d.number + 1}/{budget}: distance {d.distance:.3f} ({d.within}/{d.cells} cells "
          f"within target) best {best:.3f} [{d.seconds:.1f} s; {elapsed:.0f} s elapsed, "
          f"about {left:.0f} s left]", file=log, flush=True)


def profile_text(cfg: CalibrationConfig, loop: Loop, best: Trial) -> str:
    """The profile: the base profile's keys with the measured and the calibrated values on top. No
    timestamps, so the same search gives the same file."""
    base_path = Path(cfg.conf_dir) / "profile" / f"{cfg.base_profile}.yaml"
    node = OmegaConf.load(base_path)
    node.profile = cfg.name
    fixed = dict(loop.spec.fixed)
    for key, value in sorted({**fixed, **config_values(best.values, loop.spec.parameters)}.items()):
        OmegaConf.update(node, key, value, merge=True)
    header = [
        "# @package _global_",
        f"# Calibrated by `testbed calibrate` for evaluation {cfg.evaluation} on workload {cfg.pattern} only (the",
        f"# paper's table for it), on top of profile {cfg.base_profile}: seed {cfg.seed}, budget {cfg.budget} trials,",
        f"# {cfg.reps} repetition(s) per trial, {cfg.duration_min:g} simulated minutes. Best trial {best.number}:",
        f"# distance {best.distance:.4f} ({best.within}/{best.cells} published cells within their tolerance).",
        f"# Search record: experiments/calibration/{cfg.name}.record.json. Calibrated values:",
        *(f"#   {name} = {value}" for name, value in best.values.items()),
        *(["# Measured values (evaluation.fidelity.fixed, not searched):"] if fixed else []),
        *(f"#   {key} = {value}" for key, value in sorted(fixed.items())),
    ]
    return "\n".join(header) + "\n" + OmegaConf.to_yaml(node)


def write_profile(cfg: CalibrationConfig, loop: Loop, best: Trial) -> Path:
    return cfg.targets()[0].write(profile_text(cfg, loop, best))


def write_record(result: CalibrationResult) -> List[Path]:
    cfg = result.config
    _, csv_target, json_target = cfg.targets()
    rows = [{"trial": t.number, "distance": t.distance, "within": t.within, "cells": t.cells,
             "worst": t.worst, "seconds": round(t.seconds, 2), **t.values} for t in result.trials]
    csv_path = csv_target.write(pd.DataFrame(rows).to_csv(index=False))
    gaps = result.gaps[["config", "metric", "mean_paper", "mean_measured", "gap", "unit", "within"]]
    record = {
        "config": asdict(cfg) | {"conf_dir": _relative(cfg.conf_dir), "record_dir": _relative(cfg.record_dir)},
        "search": {"library": f"optuna {optuna.__version__}", "sampler": "TPESampler(multivariate, seeded)",
                   "space": [asdict(p) for p in result.loop.spec.parameters],
                   "fixed": dict(result.loop.spec.fixed), "cells": dict(result.loop.spec.cells)},
        "best": asdict(result.best),
        "best_cells": json.loads(gaps.to_json(orient="records")),
        "wall_time_s": round(result.wall_time_s, 1),
        "trials": len(result.trials),
    }
    json_path = json_target.write(json.dumps(record, indent=1) + "\n")
    return [csv_path, json_path]


def _relative(path: str) -> str:
    """A path inside the project relative to its root (records do not name the checkout's place)."""
    root = CONF_DIR.parent.parent
    p = Path(path).resolve()
    return str(p.relative_to(root)) if p.is_relative_to(root) else str(p)


def main(argv: Optional[Sequence[str]] = None) -> int:
    cfg = parse_command(CalibrationConfig, argv, __doc__ or "")
    if isinstance(cfg, int):
        return cfg
    try:
        plan = plan_calibration(cfg)
    except ConfigError as exc:
        return config_error(exc)
    result = search(plan, log=sys.stderr)
    b = result.best
    print(f"best trial {b.number}: distance {b.distance:.4f}, {b.within}/{b.cells} cells within target")
    for name, value in b.values.items():
        print(f"  {name} = {value}")
    print(f"calibration wall time {result.wall_time_s:.0f} s for {len(result.trials)} trials")
    print(f"wrote {result.profile_path}, " + ", ".join(str(p) for p in result.record_paths))
    return 0
