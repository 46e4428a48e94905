"""One evaluation of a parameter assignment: compose the config, run an evaluation's
configurations on one workload, summarise them with reporting.summary and measure the distance of
the evaluation's published cells (its own comparison, its cell kinds)."""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, Tuple

import pandas as pd
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from reporting.evaluations import report_for
from reporting.fidelity_gaps import Distance, cell_gaps, distance
from reporting.paper_comparison import compare
from reporting.summary import summarise
from testbed.arguments import flatten
from testbed.config import CONF_DIR, ConfigError, ExperimentConfig, register, to_typed, validate
from testbed.experiment import execute, plan_runs
from testbed.fidelity.parameters import to_overrides
from testbed.fidelity_spec import FidelitySpec


def compose_experiment(overrides: Sequence[str], conf_dir: Path = CONF_DIR) -> ExperimentConfig:
    """The typed, validated experiment config of the Hydra tree with command-line style overrides."""
    register()
    if GlobalHydra.instance().is_initialized():  # e.g. inside a Hydra app: compose needs its own
        GlobalHydra.instance().clear()
    with initialize_config_dir(str(Path(conf_dir).resolve()), version_base="1.3"):
        return validate(to_typed(compose("config", overrides=list(overrides))))


@dataclass(frozen=True)
class Loop:
    """An evaluation's fidelity loop: its declared spec, its published table and how its cells pair."""

    evaluation: str
    spec: FidelitySpec
    duration_min: float  # of a trial: the spec's, else the evaluation's own
    conf_dir: Path = CONF_DIR

    @classmethod
    def load(cls, evaluation: str, conf_dir: Path = CONF_DIR) -> "Loop":
        """The loop `evaluation.fidelity` declares; ConfigError naming `evaluation` when there is none."""
        if not (Path(conf_dir) / "evaluation" / f"{evaluation}.yaml").is_file():
            raise ConfigError("evaluation", f"no evaluation {evaluation!r} in {conf_dir}/evaluation")
        cfg = compose_experiment([f"evaluation={evaluation}"], conf_dir)
        spec = cfg.evaluation.fidelity
        if not spec.declared:
            raise ConfigError("evaluation", f"{evaluation!r} declares no fidelity loop (evaluation.fidelity)")
        _check_profile_wins(Path(conf_dir) / "evaluation" / f"{evaluation}.yaml", spec)
        return cls(evaluation, spec, spec.duration_min or cfg.duration_min, Path(conf_dir))

    def reference(self, evaluation: str = "") -> pd.DataFrame:
        return report_for(evaluation or self.evaluation).reference()

    def comparer(self, evaluation: str = "") -> Callable[[pd.DataFrame, pd.DataFrame], pd.DataFrame]:
        return report_for(evaluation or self.evaluation).compare or compare

    def overrides(self, values: Optional[Mapping[str, Any]]) -> Tuple[str, ...]:
        """A trial's overrides: the measured values and the searched ones."""
        return tuple(to_overrides(values or {}, self.spec.parameters, self.spec.fixed))

    def setting(self, pattern: str, profile: str, reps: int, seed: int,
                values: Optional[Mapping[str, Any]] = None, extra: Sequence[str] = (),
                evaluation: str = "") -> "Setting":
        return Setting(pattern, profile, reps, seed, self.duration_min, self.overrides(values) + tuple(extra),
                       evaluation or self.evaluation)

    def cells(self, summary: pd.DataFrame, pattern: str, evaluation: str = "") -> pd.DataFrame:
        """The published cells of one pattern with their gaps (reporting.fidelity_gaps.cell_gaps)."""
        ref = self.reference(evaluation)
        return cell_gaps(self.comparer(evaluation)(summary, ref[ref["pattern"] == pattern]), self.spec.cells)

    def searched(self, reference: pd.DataFrame, pattern: str) -> pd.DataFrame:
        """The published cells the search sees: the calibration workload's, of `calibrate_configs` only."""
        ref = reference[reference["pattern"] == pattern]
        configs = self.spec.calibrate_configs
        return ref[ref["approach"].isin(configs)] if configs and pattern == self.spec.calibrate_on else ref

    def calibration_setting(self, pattern: str, profile: str, reps: int, seed: int,
                            values: Mapping[str, Any]) -> "Setting":
        """A trial: only the configurations whose cells the search sees run."""
        only = [f"evaluation.only=[{','.join(self.spec.calibrate_configs)}]"] if self.spec.calibrate_configs else []
        return self.setting(pattern, profile, reps, seed, values, only)


def _check_profile_wins(path: Path, spec: FidelitySpec) -> None:
    """A calibrated profile is applied before the evaluation's YAML: a key the YAML sets itself would
    silently undo the profile's value, so it may be neither searched nor fixed."""
    from omegaconf import OmegaConf

    raw: Any = OmegaConf.to_container(OmegaConf.load(path))
    assert isinstance(raw, dict)
    raw.pop("defaults", None)
    raw.pop("evaluation", None)
    own = set(flatten(raw))
    for where, key in spec.set_keys():
        if any(key == o or key.startswith(o + ".") or o.startswith(key + ".") for o in own):
            raise ConfigError(f"evaluation.fidelity.{where}",
                              f"{key!r} is set by {path.name} itself, which would override the calibrated profile; "
                              "move it to a profile or the topology")


@dataclass(frozen=True)
class Setting:
    """What one evaluation runs: an evaluation's workload under a profile, plus overrides."""

    pattern: str
    profile: str
    reps: int = 1
    seed: int = 1
    duration_min: float = 120.0
    extra: Sequence[str] = ()  # overrides: parameter values, measured values, a behaviour switched off
    evaluation: str = "btu"

    def overrides(self, out: Path) -> list:
        return [f"evaluation={self.evaluation}", f"pattern={self.pattern}", f"profile={self.profile}",
                f"reps={self.reps}", f"seed={self.seed}", f"duration_min={self.duration_min}", f"out={out}",
                "workers=1", "summary=false", *self.extra]


def run_setting(setting: Setting, out: Path, conf_dir: Path = CONF_DIR) -> pd.DataFrame:
    """Run the configurations of a setting into `out` (one process: the machine's other core is
    not ours) and return its summary (long format of the published table)."""
    cfg = compose_experiment(setting.overrides(out), conf_dir)
    for spec in plan_runs(cfg):
        execute(cfg, spec)
    return summarise(Path(out) / setting.pattern)


def evaluate(setting: Setting, loop: Loop) -> tuple[pd.DataFrame, Distance]:
    """Summary and distance to the published table of one setting; its runs are thrown away."""
    with tempfile.TemporaryDirectory(prefix="fidelity-", ignore_cleanup_errors=True) as out:
        summary = run_setting(setting, Path(out), loop.conf_dir)
    reference = loop.searched(loop.reference(setting.evaluation), setting.pattern)
    return summary, distance(summary, reference, setting.pattern, loop.spec.cells, loop.comparer(setting.evaluation))
