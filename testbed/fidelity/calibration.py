"""`testbed calibrate`: a seeded, budgeted search of the simulator's unknowns on ONE pattern.

The search (optuna's TPE sampler, sequential, seeded) starts from the base profile's own values and
minimises the distance of the pattern's matrix to its published table only. The best assignment is
written as a Hydra profile (base profile + calibrated values) and the search's record (every trial,
the best trial's cell gaps, the wall time) beside it. Same seed and budget give the same profile.

    testbed calibrate pattern=stepwise budget=120 seed=1
"""
from __future__ import annotations

import json
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, TextIO

import optuna
import pandas as pd
from omegaconf import OmegaConf

from reporting.evaluations.btu import load_reference
from reporting.fidelity_gaps import cell_gaps
from reporting.paper_comparison import compare
from testbed.arguments import parse_arguments, parse_command
from testbed.config import CONF_DIR, ConfigError
from testbed.fidelity.evaluation import Setting, compose_experiment, evaluate
from testbed.fidelity.parameters import SEARCH_SPACE, Kind, config_values, current_values, round3

RECORD_DIR = CONF_DIR.parent / "calibration"


@dataclass
class CalibrationConfig:
    pattern: str = "stepwise"  # the only pattern whose published table the search sees
    budget: int = 120  # trials (each runs the pattern's matrix: threshold + BTU 10/30/60)
    seed: int = 1  # of the sampler and of the runs
    reps: int = 1  # repetitions per trial (common random numbers: the same seeds in every trial)
    base_profile: str = "visp2017"  # the behaviours of the original system the values are added to
    name: str = "paper_calibrated"  # the profile written: <conf_dir>/profile/<name>.yaml
    duration_min: float = 120.0
    startup_trials: int = 12  # random trials before TPE models the distance
    conf_dir: str = str(CONF_DIR)
    record_dir: str = str(RECORD_DIR)  # <name>.record.csv (trials) and <name>.record.json

    def validate(self) -> "CalibrationConfig":
        for key in ("budget", "reps", "duration_min"):
            if not getattr(self, key) > 0:
                raise ConfigError(key, f"must be > 0, got {getattr(self, key)}")
        if self.startup_trials < 0:
            raise ConfigError("startup_trials", "must be >= 0")
        if not 0 <= self.seed <= 2**32 - 1:  # optuna's sampler seeds numpy's legacy RandomState
            raise ConfigError("seed", f"must be an integer in [0, 2**32 - 1], got {self.seed}")
        if not (Path(self.conf_dir) / "profile" / f"{self.base_profile}.yaml").is_file():
            raise ConfigError("base_profile", f"no profile {self.base_profile!r} in {self.conf_dir}/profile")
        if not self.name.isidentifier():
            raise ConfigError("name", f"must be a plain name, got {self.name!r}")
        if self.name == self.base_profile:
            raise ConfigError("name", "must differ from base_profile")
        return self


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


@dataclass
class CalibrationResult:
    config: CalibrationConfig
    best: Trial
    trials: List[Trial]
    gaps: pd.DataFrame  # the best trial's cells
    wall_time_s: float
    profile_path: Path
    record_paths: List[Path] = field(default_factory=list)


def _suggest(trial: optuna.Trial) -> Dict[str, Any]:
    values: Dict[str, Any] = {}
    for p in SEARCH_SPACE:
        if p.kind == Kind.categorical:
            values[p.name] = trial.suggest_categorical(p.name, list(p.choices))
        elif p.kind == Kind.int:
            values[p.name] = trial.suggest_int(p.name, int(p.low), int(p.high))
        else:
            values[p.name] = round3(trial.suggest_float(p.name, p.low, p.high, log=p.kind == Kind.log_float))
    return values


def calibrate(cfg: CalibrationConfig, log: Optional[TextIO] = None) -> CalibrationResult:
    """Run the search and write the profile and its record."""
    reference = load_reference()
    base = compose_experiment([f"pattern={cfg.pattern}", f"profile={cfg.base_profile}"], Path(cfg.conf_dir))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # multivariate TPE
    sampler = optuna.samplers.TPESampler(seed=cfg.seed, n_startup_trials=cfg.startup_trials, multivariate=True)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    study.enqueue_trial(current_values(base))  # the base profile's own estimates first
    trials: List[Trial] = []
    summaries: Dict[int, pd.DataFrame] = {}  # per trial number: the best trial's cells come from it
    started = time.perf_counter()

    def objective(trial: optuna.Trial) -> float:
        t0 = time.perf_counter()
        values = _suggest(trial)
        setting = Setting(cfg.pattern, cfg.base_profile, cfg.reps, cfg.seed, cfg.duration_min, values)
        summaries[trial.number], d = evaluate(setting, reference, Path(cfg.conf_dir))
        trials.append(Trial(trial.number, values, d.value, d.within, d.cells,
                            f"{d.worst_metric} {d.worst_config}", time.perf_counter() - t0))
        if log:
            best = min(t.distance for t in trials)
            elapsed = time.perf_counter() - started
            left = elapsed / len(trials) * (cfg.budget - len(trials))
            print(f"trial {trial.number + 1}/{cfg.budget}: distance {d.value:.3f} ({d.within}/{d.cells} cells "
                  f"within target) best {best:.3f} [{trials[-1].seconds:.1f} s; {elapsed:.0f} s elapsed, "
                  f"about {left:.0f} s left]", file=log, flush=True)
        return d.value

    study.optimize(objective, n_trials=cfg.budget)
    best = min(trials, key=lambda t: (t.distance, t.number))
    gaps = cell_gaps(compare(summaries[best.number], reference[reference["pattern"] == cfg.pattern]))
    wall = time.perf_counter() - started
    profile_path = write_profile(cfg, best)
    result = CalibrationResult(cfg, best, trials, gaps, wall, profile_path)
    result.record_paths = write_record(result)
    return result


def profile_text(cfg: CalibrationConfig, best: Trial) -> str:
    """The profile: the base profile's keys with the calibrated values on top. No timestamps, so
    the same search gives the same file."""
    base_path = Path(cfg.conf_dir) / "profile" / f"{cfg.base_profile}.yaml"
    node = OmegaConf.load(base_path)
    node.profile = cfg.name
    for key, value in sorted(config_values(best.values).items()):
        OmegaConf.update(node, key, value, merge=True)
    header = [
        "# @package _global_",
        f"# Calibrated by `testbed calibrate` on pattern {cfg.pattern} only (the paper's table for it), on top",
        f"# of profile {cfg.base_profile}: seed {cfg.seed}, budget {cfg.budget} trials, {cfg.reps} repetition(s)",
        f"# per trial, {cfg.duration_min:g} simulated minutes. Best trial {best.number}: distance {best.distance:.4f}",
        f"# ({best.within}/{best.cells} published cells within 5 pp / 15 %). Search record:",
        f"# experiments/calibration/{cfg.name}.record.json. Calibrated values:",
        *(f"#   {name} = {value}" for name, value in best.values.items()),
    ]
    return "\n".join(header) + "\n" + OmegaConf.to_yaml(node)


def write_profile(cfg: CalibrationConfig, best: Trial) -> Path:
    path = Path(cfg.conf_dir) / "profile" / f"{cfg.name}.yaml"
    path.write_text(profile_text(cfg, best), encoding="utf-8")
    return path


def write_record(result: CalibrationResult) -> List[Path]:
    cfg = result.config
    folder = Path(cfg.record_dir)
    folder.mkdir(parents=True, exist_ok=True)
    csv_path, json_path = folder / f"{cfg.name}.record.csv", folder / f"{cfg.name}.record.json"
    rows = [{"trial": t.number, "distance": t.distance, "within": t.within, "cells": t.cells,
             "worst": t.worst, "seconds": round(t.seconds, 2), **t.values} for t in result.trials]
    pd.DataFrame(rows).to_csv(csv_path, index=False)
    gaps = result.gaps[["config", "metric", "mean_paper", "mean_measured", "gap", "unit", "within"]]
    record = {
        "config": asdict(cfg) | {"conf_dir": _relative(cfg.conf_dir), "record_dir": _relative(cfg.record_dir)},
        "search": {"library": f"optuna {optuna.__version__}", "sampler": "TPESampler(multivariate, seeded)",
                   "space": [{"name": p.name, "kind": p.kind.value, "keys": list(p.keys), "low": p.low, "high": p.high,
                              "choices": list(p.choices), "range_ratio": p.range_ratio, "doc": p.doc}
                             for p in SEARCH_SPACE]},
        "best": asdict(result.best),
        "best_cells": json.loads(gaps.to_json(orient="records")),
        "wall_time_s": round(result.wall_time_s, 1),
        "trials": len(result.trials),
    }
    json_path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
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
    result = calibrate(cfg, log=sys.stderr)
    b = result.best
    print(f"best trial {b.number}: distance {b.distance:.4f}, {b.within}/{b.cells} cells within target")
    for name, value in b.values.items():
        print(f"  {name} = {value}")
    print(f"calibration wall time {result.wall_time_s:.0f} s for {len(result.trials)} trials")
    print(f"wrote {result.profile_path}, " + ", ".join(str(p) for p in result.record_paths))
    return 0
