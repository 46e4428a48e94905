"""`testbed fidelity`: a profile, unchanged, on every workload of an evaluation's fidelity loop
(held-out validation), plus the sensitivity sweeps the report's fidelity section explains gaps with.

    testbed fidelity out=runs/fidelity                        # the BTU paper's loop
    testbed fidelity evaluation=daedalus out=runs/fidelity-daedalus
    testbed report runs/fidelity                              # the report gains a "Fidelity" section

Unset values come from the evaluation's `evaluation.fidelity`. Writes each workload's runs to
OUT/<workload>/... (ordinary run folders; OUT-<evaluation>/<workload>/... for another evaluation's,
reported on its own), and OUT/fidelity/: sensitivity.csv (one-at-a-time sweep
of the calibrated parameters), behaviours.csv (each switch of the behaviour profile toggled, where
the evaluation names one), fidelity.json (what ran, how long).
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import List, Optional, Sequence, TextIO, Tuple

from reporting.fidelity_gaps import FIDELITY_FOLDER
from testbed.arguments import config_error, parse_arguments, parse_command
from testbed.config import CONF_DIR, ConfigError, validate_seed
from testbed.fidelity.evaluation import Loop, run_setting
from testbed.fidelity.sensitivity import behaviour_variants, parameter_variants, sweep


@dataclass
class FidelityConfig:
    """Unset values (None) come from the evaluation's `evaluation.fidelity`."""

    evaluation: str = "btu"
    profile: Optional[str] = None  # default: the profile the loop calibrates
    out: str = "runs/fidelity"
    patterns: Optional[List[str]] = None  # default: the calibration workload, then the held-out ones
    reps: int = 3  # of the validation runs
    seed: int = 1
    sweep_reps: int = 1
    validation: bool = True  # false: only the sweeps (e.g. after changing a profile's switches)
    sweeps: Optional[List[str]] = None  # sensitivity, behaviours (default: those the evaluation has)

    def validate(self) -> "FidelityConfig":
        for key in ("reps", "sweep_reps"):
            if not getattr(self, key) > 0:
                raise ConfigError(key, f"must be > 0, got {getattr(self, key)}")
        validate_seed("seed", self.seed)
        if self.profile is not None and not (CONF_DIR / "profile" / f"{self.profile}.yaml").is_file():
            raise ConfigError("profile", f"no profile {self.profile!r} in {CONF_DIR}/profile")
        unknown = sorted(set(self.sweeps or ()) - {"sensitivity", "behaviours"})
        if unknown:
            raise ConfigError("sweeps", f"unknown sweep(s) {unknown}; known: sensitivity, behaviours")
        for i, p in enumerate(self.patterns or ()):
            workload = p.split(":", 1)[-1]
            if not (CONF_DIR / "pattern" / f"{workload}.yaml").is_file():
                raise ConfigError(f"patterns[{i}]", f"no pattern {workload!r} in {CONF_DIR}/pattern")
        return self

    def resolve(self, loop: Loop) -> "FidelityConfig":
        spec = loop.spec
        sweeps = ["sensitivity", "behaviours"] if spec.behaviour_profile else ["sensitivity"]
        done = replace(self, profile=self.profile or spec.profile,
                       patterns=self.patterns or [spec.calibrate_on, *spec.validate_on],
                       sweeps=sweeps if self.sweeps is None else self.sweeps)
        if "behaviours" in (done.sweeps or ()) and not spec.behaviour_profile:
            raise ConfigError("sweeps", f"evaluation {loop.evaluation!r} names no behaviour_profile to toggle")
        if not (CONF_DIR / "profile" / f"{done.profile}.yaml").is_file():
            raise ConfigError("profile", f"no profile {done.profile!r} in {CONF_DIR}/profile "
                                         f"(testbed calibrate evaluation={loop.evaluation} writes it)")
        return done.validate()


def parse_config(args: Sequence[str]) -> FidelityConfig:
    return parse_arguments(FidelityConfig, args).validate()


def _target(entry: str) -> Tuple[str, str]:
    """(evaluation or '', workload) of a patterns entry."""
    evaluation, _, workload = entry.rpartition(":")
    return evaluation, workload


def sibling(out: Path, evaluation: str) -> Path:
    """Where a held-out workload's runs go: OUT itself, or OUT-<evaluation> for another evaluation's
    (a runs folder and its report hold one evaluation)."""
    return out.with_name(f"{out.name}-{evaluation}") if evaluation else out


def resolve(cfg: FidelityConfig) -> Tuple[Loop, FidelityConfig]:
    """The evaluation's loop and every setting resolved and checked; ConfigError naming the key."""
    loop = Loop.load(cfg.evaluation)
    return loop, cfg.resolve(loop)


def run_fidelity(cfg: FidelityConfig, log: Optional[TextIO] = None) -> Path:
    return run_resolved(*resolve(cfg), log=log)


def run_resolved(loop: Loop, cfg: FidelityConfig, log: Optional[TextIO] = None) -> Path:
    """The validation runs and the sweeps of a resolved config (`resolve`)."""
    profile = cfg.profile or ""
    out = Path(cfg.out)
    folder = out / FIDELITY_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    timings = {}
    for entry in cfg.patterns if cfg.validation and cfg.patterns else []:
        evaluation, pattern = _target(entry)
        t0 = time.perf_counter()
        run_setting(loop.setting(pattern, profile, cfg.reps, cfg.seed, evaluation=evaluation),
                    sibling(out, evaluation))
        timings[f"validation {entry}"] = round(time.perf_counter() - t0, 1)
        if log:
            print(f"validation {entry}: {timings[f'validation {entry}']} s", file=log, flush=True)
    spec, pattern = loop.spec, loop.spec.calibrate_on
    for name in cfg.sweeps or ():
        if name == "sensitivity":
            variants = parameter_variants(loop, profile, pattern)
        else:
            variants = behaviour_variants(profile, pattern, spec.behaviour_profile, spec.plain_profile,
                                          evaluation=loop.evaluation)
        t0 = time.perf_counter()
        table = sweep(loop, profile, pattern, variants, cfg.sweep_reps, cfg.seed, log=log)
        table.to_csv(folder / f"{name}.csv", index=False)
        timings[name] = round(time.perf_counter() - t0, 1)
    meta_path = folder / "fidelity.json"
    if meta_path.is_file():  # a partial rerun keeps the timings of the parts it did not redo
        timings = {**json.loads(meta_path.read_text(encoding="utf-8")).get("seconds", {}), **timings}
    meta = asdict(cfg) | {"calibrated_on": pattern, "duration_min": loop.duration_min,
                          "sweep_pattern": pattern, "cells": dict(spec.cells),
                          "calibrate_configs": list(spec.calibrate_configs)}
    meta_path.write_text(json.dumps({"config": meta, "seconds": timings}, indent=1) + "\n", encoding="utf-8")
    return folder


def main(argv: Optional[Sequence[str]] = None) -> int:
    cfg = parse_command(FidelityConfig, argv, __doc__ or "")
    if isinstance(cfg, int):
        return cfg
    try:
        loop, cfg = resolve(cfg)  # before anything runs
    except ConfigError as exc:
        return config_error(exc)
    folder = run_resolved(loop, cfg, log=sys.stderr)
    others = sorted({sibling(Path(cfg.out), e) for e, _ in map(_target, cfg.patterns or []) if e})
    print(f"wrote the validation runs below {cfg.out} and the sweeps in {folder}; "
          f"next: testbed report {cfg.out}" + "".join(f" and testbed report {o}" for o in others))
    return 0
