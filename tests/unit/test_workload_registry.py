"""The workload registry (testbed/workloads/registry.py): every built-in kind registered, the flat
`pattern` node built from their union, a kind added from outside the package (a module named by
TESTBED_WORKLOAD_MODULES) runs an experiment without any edit of the testbed."""
from __future__ import annotations

import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import List

import numpy as np
import pytest

from testbed.config import ConfigError, to_plain
from testbed.eventlog import find_runs, read_manifest
from testbed.experiment import run_experiment
from testbed.workloads import registry
from testbed.workloads.cycle import Cycle
from testbed.workloads.patterns import PatternError, make_pattern, pattern_config, validate_pattern
from testbed.workloads.registry import PatternConfig, pattern_schema, register_workload, workload_kinds
from tests.conftest import compose_config

RAMP_MODULE = '''
from dataclasses import dataclass
from typing import Optional

import numpy as np

from testbed.workloads.cycle import CyclePattern
from testbed.workloads.registry import Pattern, PatternConfig, register_workload


@register_workload("ramp")
@dataclass
class Ramp(PatternConfig):
    kind: str = "ramp"
    top: int = 3

    def validate(self) -> None:
        if self.top < 1:
            raise ValueError(f"top: must be >= 1, got {self.top}")

    def build(self, rng: Optional[np.random.Generator]) -> Pattern:
        return CyclePattern(self.name, tuple(range(1, self.top + 1)), self.step_minutes * 60.0)
'''


@pytest.fixture
def own_registry(monkeypatch):
    """A copy of the registry: kinds a test registers are gone after it."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(workload_kinds()))


@pytest.fixture
def ramp_module(tmp_path, monkeypatch, own_registry):
    """A kind in a module outside the package, found through TESTBED_WORKLOAD_MODULES."""
    name = f"ramp_kind_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(RAMP_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("TESTBED_WORKLOAD_MODULES", name)
    yield name
    sys.modules.pop(name, None)


def test_every_built_in_kind_is_registered() -> None:
    assert set(workload_kinds()) >= {"cycle", "replay", "random_walk", "spikes", "daedalus", "trace"}
    schema = {f for f in pattern_schema().__dataclass_fields__}
    # the flat node keeps every key the YAMLs and overrides use
    assert {"levels", "column", "start", "p_down", "spikes", "workload", "path", "time_unit", "scale"} <= schema


def test_a_composed_node_becomes_its_kinds_own_settings() -> None:
    cfg = compose_config("pattern=two_level", "pattern.levels=[3,6]")
    assert isinstance(cfg.pattern, Cycle) and cfg.pattern.levels == [3, 6]
    assert to_plain(cfg)["pattern"] == {"name": "two_level", "kind": "cycle", "step_minutes": 8.0,
                                        "seed_offset": 0, "levels": [3, 6]}


def test_an_unknown_kind_is_named() -> None:
    with pytest.raises(ConfigError) as err:
        compose_config("pattern.kind=nosuch")
    assert err.value.key == "pattern.kind" and "trace" in str(err.value)
    with pytest.raises(PatternError) as exc:
        validate_pattern(PatternConfig(kind="nosuch"))
    assert exc.value.key == "kind"


def test_a_kind_must_subclass_the_common_keys_and_name_itself(own_registry) -> None:
    with pytest.raises(TypeError, match="subclassing PatternConfig"):
        register_workload("plain")(dataclass(type("Plain", (), {})))
    with pytest.raises(TypeError, match="kind: str = 'other'"):
        @register_workload("other")
        @dataclass
        class Misnamed(PatternConfig):
            kind: str = "misnamed"


def test_two_kinds_may_share_a_key_only_alike(own_registry) -> None:
    @register_workload("levels_too")
    @dataclass
    class LevelsToo(PatternConfig):
        kind: str = "levels_too"
        levels: List[int] = field(default_factory=lambda: [2, 5, 8, 5])  # as cycle's: one key

    assert "levels" in pattern_schema().__dataclass_fields__

    @register_workload("clash")
    @dataclass
    class Clash(PatternConfig):
        kind: str = "clash"
        levels: str = "high"

    with pytest.raises(TypeError, match="'clash'.*pattern.levels|pattern.levels.*rename"):
        pattern_schema()


def test_an_external_kind_runs_an_experiment(ramp_module, tmp_path) -> None:
    assert "ramp" in workload_kinds()
    p = make_pattern(pattern_config(kind="ramp", name="ramp", top=4, step_minutes=1.0))
    assert p.series(np.arange(0.0, 480.0, 60.0)).tolist() == [1, 2, 3, 4, 1, 2, 3, 4]
    with pytest.raises(ConfigError) as err:
        compose_config("pattern.kind=ramp", "pattern.top=0")
    assert err.value.key == "pattern.top"
    out = tmp_path / "runs"
    cfg = compose_config("pattern.kind=ramp", "pattern.name=ramp", "pattern.top=3", "pattern.step_minutes=1",
                         "policy=threshold", "reps=1", "duration_min=4", "workers=1", "summary=false", f"out={out}")
    run_experiment(cfg)
    (run,) = find_runs(out)
    manifest = read_manifest(run)
    assert manifest.status == "complete"
    assert manifest.resolved_config["pattern"] == {"name": "ramp", "kind": "ramp", "step_minutes": 1.0,
                                                   "seed_offset": 0, "top": 3}


def test_job_mode_needs_a_kind_with_rates() -> None:
    with pytest.raises(ConfigError) as err:
        compose_config("evaluation=daedalus", "pattern=stepwise")
    assert err.value.key == "pattern"
    assert "job mode" in str(err.value) and "wc_sine" in str(err.value) and "pattern=trace" in str(err.value)
    compose_config("evaluation=daedalus", "pattern=presps_spikes")  # a rate series is fine


def test_settings_pickle_for_worker_processes() -> None:
    import pickle

    example = Path(__file__).parents[2] / "experiments" / "traces" / "example.csv"
    cfg = compose_config("pattern=trace", f"pattern.path={example}")
    again = pickle.loads(pickle.dumps(cfg))
    assert again.pattern == cfg.pattern and type(again.pattern).__name__ == "Trace"
