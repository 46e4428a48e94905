"""One evaluation of a parameter assignment: compose the config, run the paper's matrix for one
pattern (threshold + BTU 10/30/60), summarise it with reporting.summary and measure the distance."""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import pandas as pd
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from reporting.fidelity_gaps import Distance, distance
from reporting.summary import summarise
from testbed.config import CONF_DIR, ExperimentConfig, register, to_typed, validate
from testbed.experiment import execute, plan_runs
from testbed.fidelity.parameters import to_overrides


def compose_experiment(overrides: Sequence[str], conf_dir: Path = CONF_DIR) -> ExperimentConfig:
    """The typed, validated experiment config of the Hydra tree with command-line style overrides."""
    register()
    if GlobalHydra.instance().is_initialized():  # e.g. inside a Hydra app: compose needs its own
        GlobalHydra.instance().clear()
    with initialize_config_dir(str(Path(conf_dir).resolve()), version_base="1.3"):
        return validate(to_typed(compose("config", overrides=list(overrides))))


@dataclass(frozen=True)
class Setting:
    """What one evaluation runs: a pattern under a profile plus parameter values and overrides."""

    pattern: str
    profile: str
    reps: int = 1
    seed: int = 1
    duration_min: float = 120.0
    values: Optional[Mapping[str, Any]] = None  # search-space values (testbed.fidelity.parameters)
    extra: Sequence[str] = ()  # further overrides (e.g. a behaviour switched off)

    def overrides(self, out: Path) -> list:
        return [f"pattern={self.pattern}", f"profile={self.profile}", f"reps={self.reps}", f"seed={self.seed}",
                f"duration_min={self.duration_min}", f"out={out}", "workers=1", "summary=false",
                *to_overrides(self.values or {}), *self.extra]


def run_setting(setting: Setting, out: Path, conf_dir: Path = CONF_DIR) -> pd.DataFrame:
    """Run the matrix of a setting into `out` (one process: the machine's other core is not ours)
    and return its summary (long format of the published table)."""
    cfg = compose_experiment(setting.overrides(out), conf_dir)
    for spec in plan_runs(cfg):
        execute(cfg, spec)
    return summarise(Path(out) / setting.pattern)


def evaluate(setting: Setting, reference: pd.DataFrame, conf_dir: Path = CONF_DIR) -> tuple[pd.DataFrame, Distance]:
    """Summary and distance to the published table of one setting; its runs are thrown away."""
    with tempfile.TemporaryDirectory(prefix="fidelity-", ignore_cleanup_errors=True) as out:
        summary = run_setting(setting, Path(out), conf_dir)
    return summary, distance(summary, reference, setting.pattern)
