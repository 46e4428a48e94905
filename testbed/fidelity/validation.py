"""`testbed fidelity`: a profile, unchanged, on every pattern (held-out validation), plus the
sensitivity sweeps the report's fidelity section explains gaps with.

    testbed fidelity profile=paper_calibrated out=runs/fidelity
    testbed report runs/fidelity           # the report gains a "Fidelity" section

Writes the paper's matrix per pattern to OUT/<pattern>/... (ordinary run folders), and
OUT/fidelity/: sensitivity.csv (one-at-a-time sweep of the calibrated parameters),
behaviours.csv (each visp2017 behaviour toggled), fidelity.json (what ran, how long).
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence, TextIO

from reporting.evaluations.btu import load_reference
from reporting.fidelity_gaps import FIDELITY_FOLDER
from testbed.arguments import parse_arguments, parse_command
from testbed.config import CONF_DIR, ConfigError, validate_seed
from testbed.fidelity.evaluation import Setting, run_setting
from testbed.fidelity.sensitivity import behaviour_variants, parameter_variants, sweep


@dataclass
class FidelityConfig:
    profile: str = "paper_calibrated"
    out: str = "runs/fidelity"
    patterns: List[str] = field(default_factory=lambda: ["stepwise", "two_level", "random_walk_1", "random_walk_2"])
    reps: int = 3  # of the validation runs (the paper's three)
    seed: int = 1
    duration_min: float = 120.0
    sweep_pattern: str = "stepwise"  # the sweeps run on the calibration pattern
    sweep_reps: int = 1
    validation: bool = True  # false: only the sweeps (e.g. after changing a profile's switches)
    sweeps: List[str] = field(default_factory=lambda: ["sensitivity", "behaviours"])
    behaviour_profile: str = "visp2017"  # whose switches are toggled one at a time
    plain_profile: str = "paper"  # the values those switches take when off
    calibrated_on: str = "stepwise"  # named in the report: the other patterns are held out

    def validate(self) -> "FidelityConfig":
        for key in ("reps", "sweep_reps", "duration_min"):
            if not getattr(self, key) > 0:
                raise ConfigError(key, f"must be > 0, got {getattr(self, key)}")
        validate_seed("seed", self.seed)
        for key in ("profile", "behaviour_profile", "plain_profile"):
            if not (CONF_DIR / "profile" / f"{getattr(self, key)}.yaml").is_file():
                raise ConfigError(key, f"no profile {getattr(self, key)!r} in {CONF_DIR}/profile")
        unknown = sorted(set(self.sweeps) - {"sensitivity", "behaviours"})
        if unknown:
            raise ConfigError("sweeps", f"unknown sweep(s) {unknown}; known: sensitivity, behaviours")
        for i, p in enumerate([*self.patterns, self.sweep_pattern]):
            if not (CONF_DIR / "pattern" / f"{p}.yaml").is_file():
                key = f"patterns[{i}]" if i < len(self.patterns) else "sweep_pattern"
                raise ConfigError(key, f"no pattern {p!r} in {CONF_DIR}/pattern")
        return self


def parse_config(args: Sequence[str]) -> FidelityConfig:
    return parse_arguments(FidelityConfig, args).validate()


def run_fidelity(cfg: FidelityConfig, log: Optional[TextIO] = None) -> Path:
    out = Path(cfg.out)
    folder = out / FIDELITY_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    timings = {}
    for pattern in cfg.patterns if cfg.validation else []:
        t0 = time.perf_counter()
        run_setting(Setting(pattern, cfg.profile, cfg.reps, cfg.seed, cfg.duration_min), out)
        timings[f"validation {pattern}"] = round(time.perf_counter() - t0, 1)
        if log:
            print(f"validation {pattern}: {timings[f'validation {pattern}']} s", file=log, flush=True)
    reference = load_reference()
    for name in cfg.sweeps:
        if name == "sensitivity":
            variants = parameter_variants(cfg.profile, cfg.sweep_pattern)
        else:
            variants = behaviour_variants(cfg.profile, cfg.sweep_pattern, cfg.behaviour_profile, cfg.plain_profile)
        t0 = time.perf_counter()
        table = sweep(cfg.profile, cfg.sweep_pattern, variants, reference, cfg.sweep_reps, cfg.seed,
                      cfg.duration_min, log=log)
        table.to_csv(folder / f"{name}.csv", index=False)
        timings[name] = round(time.perf_counter() - t0, 1)
    meta_path = folder / "fidelity.json"
    if meta_path.is_file():  # a partial rerun keeps the timings of the parts it did not redo
        timings = {**json.loads(meta_path.read_text(encoding="utf-8")).get("seconds", {}), **timings}
    meta_path.write_text(json.dumps({"config": asdict(cfg), "seconds": timings}, indent=1) + "\n", encoding="utf-8")
    return folder


def main(argv: Optional[Sequence[str]] = None) -> int:
    cfg = parse_command(FidelityConfig, argv, __doc__ or "")
    if isinstance(cfg, int):
        return cfg
    folder = run_fidelity(cfg, log=sys.stderr)
    print(f"wrote the validation runs below {cfg.out} and the sweeps in {folder}; "
          f"next: testbed report {cfg.out}")
    return 0
