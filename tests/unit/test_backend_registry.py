"""The backend registry: the built-in backends found by discovery and declaring what the experiment
and the readers need; a backend in a module outside the testbed's package (named in
TESTBED_BACKEND_MODULES, nothing else edited) typed, validated and run end to end by `testbed
experiment`; a plug-in that would hide a built-in, or cannot be imported, stopped with one line."""
from __future__ import annotations

import os
import pickle
import sys
import textwrap
import typing
from pathlib import Path

import pytest

from testbed import backend_registry as registry
from testbed import discovery
from testbed.arguments import ConfigError
from testbed.backend_registry import Backend, BackendSettings, configuration_on, register_backend, run_configuration
from testbed.config import to_plain
from testbed.eventlog import EventLog, read_manifest
from testbed.experiment import config_for, plan_runs
from tests import guarded
from tests.conftest import compose_config

ROOT = Path(__file__).resolve().parents[2]
MODULE = "outside_replay_backend"
SOURCE = '''
"""A backend kept outside the testbed's package: the simulator's engine on a machine `slowdown`
times slower (every service time longer by that factor), its runs named <configuration>-replay."""
import copy
from dataclasses import dataclass

from testbed.arguments import ConfigError
from testbed.backend_registry import Backend, BackendSettings, register_backend


@dataclass
class ReplaySettings(BackendSettings):
    slowdown: float = 1.0
    label: str = "replayed"


@register_backend("replay", ReplaySettings, key="replay", modes=("operator",), suffix="-replay")
class Replay(Backend):
    def validate(self, cfg):
        if not cfg.backend.replay.slowdown >= 1:
            raise ConfigError("backend.replay.slowdown", f"must be >= 1, got {cfg.backend.replay.slowdown}")

    def run(self, run):
        from testbed.sim.simulator import Simulation

        cfg, settings = copy.deepcopy(run.cfg), run.cfg.backend.replay
        for op in cfg.topology.operators.values():
            op.service.mean_ms *= settings.slowdown
        result = Simulation(cfg, run.policy, run.pattern, run.seed, run.btu_minutes).run()
        result.details["replay"] = {"label": settings.label, "slowdown": settings.slowdown}
        return result
'''


@pytest.fixture
def outside_backend(tmp_path, monkeypatch):
    """The module written to a folder on the Python path and named in the environment; the
    registry and the module cache are restored afterwards."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / f"{MODULE}.py").write_text(textwrap.dedent(SOURCE))
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry.backends()))  # restored after the test
    monkeypatch.setattr(registry, "_classes", {})
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv(registry.MODULES_VARIABLE, MODULE)
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    yield folder
    sys.modules.pop(MODULE, None)


def test_the_built_in_backends_declare_what_the_runs_need():
    found = registry.backends()
    assert {"sim", "docker", "flink"} <= set(found)
    sim, docker, flink = found["sim"], found["docker"], found["flink"]
    assert (sim.key, sim.suffix, sim.modes, sim.shares_machine) == ("", "", ("operator", "job"), False)
    assert (docker.key, docker.suffix, docker.twin, docker.emission) == ("live", "-live", True, "live")
    assert (flink.key, flink.suffix, flink.modes, flink.shares_machine) == ("flink", "-flink", ("job",), True)


def test_the_backend_node_keeps_its_keys_and_pickles():
    cfg = compose_config("evaluation=daedalus_live", "reps=1")
    node = to_plain(cfg)["backend"]
    assert {"name", "step_ms", "hop_latency_ms", "cpu_contention", "exact", "shared_cores", "emulation", "live",
            "flink"} <= set(node)
    again = pickle.loads(pickle.dumps(cfg))  # worker processes get the config pickled
    assert to_plain(again) == to_plain(cfg) and again.backend.live.job.time_compression == 6


def test_job_mode_times_are_compressed_by_the_backend():
    cfg = compose_config("evaluation=daedalus_flink", "reps=1")
    run_cfg = config_for(cfg, plan_runs(cfg)[0])
    assert run_cfg.duration_min == pytest.approx(cfg.duration_min / cfg.backend.flink.time_compression)
    sim = compose_config("evaluation=daedalus", "reps=1")
    assert config_for(sim, plan_runs(sim)[0]).duration_min == sim.duration_min


def test_an_unregistered_backend_or_a_mode_it_does_not_run_fails_naming_the_key():
    with pytest.raises(ConfigError) as err:
        compose_config("backend.name=nowhere")
    assert err.value.key == "backend.name" and "registered" in str(err.value)
    with pytest.raises(ConfigError) as err:
        compose_config("backend=flink")
    assert err.value.key == "backend" and "job mode only" in str(err.value)


def test_an_outside_backend_is_typed_validated_and_named(outside_backend):
    assert "replay" in registry.backends()
    cfg = compose_config("backend=replay", "backend.replay.slowdown=2", "reps=1")
    assert (cfg.backend.name, cfg.backend.replay.slowdown, cfg.backend.replay.label) == ("replay", 2.0, "replayed")
    assert plan_runs(cfg)[0].config.endswith("-replay")
    with pytest.raises(ConfigError) as err:
        compose_config("backend=replay", "backend.replay.slowdown=0.5")
    assert err.value.key == "backend.replay.slowdown"
    with pytest.raises(ConfigError) as err:
        compose_config("backend=replay", "evaluation=daedalus")
    assert err.value.key == "backend" and "operator mode only" in str(err.value)


@pytest.mark.slow
def test_an_outside_backend_runs_an_experiment_through_the_command(tmp_path):
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / f"{MODULE}.py").write_text(textwrap.dedent(SOURCE))
    env = {**os.environ, registry.MODULES_VARIABLE: MODULE,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), str(folder), os.environ.get("PYTHONPATH")]))}
    out = tmp_path / "runs"
    args = ["backend=replay", "backend.replay.slowdown=2", "backend.replay.label=twice", "policy=threshold",
            "reps=1", "duration_min=10", f"out={out}", "summary=false"]
    done = guarded.run([sys.executable, "-m", "testbed.cli", "experiment", *args], cwd=tmp_path, env=env, cpu_s=600)
    assert done.returncode == 0, done.stderr
    run = out / "stepwise" / "threshold-replay" / "1"
    m = read_manifest(run)
    assert (m.backend, m.config, m.status, run_configuration(m)) == ("replay", "threshold-replay", "complete",
                                                                     "threshold")
    assert m.details["replay"] == {"label": "twice", "slowdown": 2.0}
    assert m.resolved_config["backend"]["replay"] == {"slowdown": 2.0, "label": "twice"}
    assert not EventLog(run).read("samples").empty
    bad = guarded.run([sys.executable, "-m", "testbed.cli", "experiment", *args, "backend.replay.slowdown=0"],
                      cwd=tmp_path, env=env, cpu_s=600)
    assert bad.returncode == 2 and "backend.replay.slowdown" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_a_backend_that_would_hide_another_is_refused(monkeypatch):
    from dataclasses import dataclass

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry.backends()))
    monkeypatch.setattr(registry, "_classes", {})

    @dataclass
    class Settings(BackendSettings):
        step_ms: float = 1.0

    @dataclass
    class Untyped:
        other_ms: float = 1.0

    class Other(Backend):
        pass

    with pytest.raises(TypeError, match="deriving from testbed.backend_registry.BackendSettings"):
        register_backend("elsewhere", Untyped, key="x")(Other)

    with pytest.raises(discovery.PluginError, match="registered already"):
        register_backend("sim", Settings, key="other")(Other)
    with pytest.raises(discovery.PluginError, match="backend.live"):
        register_backend("elsewhere", Settings, key="live")(Other)
    with pytest.raises(discovery.PluginError, match="backend.step_ms"):
        register_backend("elsewhere", Settings, key="")(Other)
    with pytest.raises(TypeError, match="must subclass"):
        register_backend("elsewhere", Settings, key="x")(object)  # type: ignore[type-var]


def test_a_module_that_cannot_be_imported_is_named_in_one_line(tmp_path, monkeypatch):
    (tmp_path / "broken_backend.py").write_text("raise RuntimeError('no engine here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(registry.MODULES_VARIABLE, "broken_backend")
    monkeypatch.delitem(sys.modules, "broken_backend", raising=False)
    with pytest.raises(discovery.PluginError) as err:
        registry.backends()
    assert registry.MODULES_VARIABLE in str(err.value) and "no engine here" in str(err.value)
    assert "\n" not in str(err.value)


def test_a_row_of_an_aggregated_table_loses_what_its_own_backend_adds():
    assert configuration_on("hpa-80-flink", "flink") == "hpa-80"
    assert configuration_on("btu-10-live", "docker") == "btu-10"
    # the backend in the row decides, not the name: a simulated configuration may end in "-live"
    assert configuration_on("btu-10-live", "sim") == "btu-10-live"
    assert configuration_on("threshold", "sim") == "threshold"
    assert configuration_on("hpa-80-replay", "not-loaded") == "hpa-80-replay"


def test_the_backend_node_has_each_attribute_its_type_declares():
    # mypy checks `cfg.backend.*` against testbed.config.BackendNode; the node is made from the registry
    from testbed.config import BackendNode

    declared = typing.get_type_hints(BackendNode)
    made = typing.get_type_hints(registry.backend_node_class())
    assert set(declared) >= {"name", "live", "flink", "step_ms", "emulation"}
    assert {k: made.get(k) for k in declared} == declared
    node = compose_config().backend
    assert all(issubclass(e.settings, BackendSettings) for e in registry.backends().values())
    assert isinstance(node.live, declared["live"]) and isinstance(node.flink, declared["flink"])
