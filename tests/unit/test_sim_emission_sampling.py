"""The two settings that say what each backend does where they used to differ silently
(docs/architecture.md#emission, #latency-sampling), on the simulator's side: what O2 and O6 pass on
(`topology.operators.<op>.emission`: a fixed ratio or a seeded incident process) and which items
give a latency sample (`runtime.sampling`); their validation at load, their record in the manifest
and the settings digest. Nothing running: the simulations are short and in process."""
from __future__ import annotations

import numpy as np
import pytest
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ValidationError

from testbed.config import ConfigError, EmissionMode, Measurement, Sampling, measurement_settings
from testbed.experiment import build_pattern, config_for, plan_runs, policy_for
from testbed.runs_folder import settings_digest
from testbed.sim.incidents import IncidentProcess
from testbed.sim.recorder import SampleRecorder
from testbed.sim.simulator import Simulation
from testbed.workloads.payloads import (
    AVAILABILITY,
    DEFECT,
    TEMPERATURE,
    Machine,
    PayloadConfig,
    items_per_incident,
)
from tests.conftest import compose_config

SHORT = ("reps=1", "policy=btu", "billing.btu_minutes=10", "duration_min=10", "pattern=constant")


def simulate(*overrides: str, seed: int = 3):
    cfg = compose_config(*SHORT, *overrides)
    [spec] = plan_runs(cfg)
    run_cfg = config_for(cfg, spec)
    sim = Simulation(run_cfg, policy_for(run_cfg), build_pattern(run_cfg.pattern, cfg.seed), seed, spec.btu_minutes)
    return sim, sim.run().tables, run_cfg


def totals(tables) -> tuple[dict, dict]:
    processed: dict = {}
    for o, n in zip(tables["processed"]["operator"], tables["processed"]["items"], strict=True):
        processed[o] = processed.get(o, 0) + n
    edges: dict = {}
    for s, t, n in zip(tables["edges"]["source"], tables["edges"]["target"], tables["edges"]["items"], strict=True):
        edges[(s, t)] = edges.get((s, t), 0) + n
    return processed, edges


# ---- configuration ------------------------------------------------------------------------------

def test_defaults_keep_each_backend_as_it_was():
    cfg = compose_config()
    for o, items in (("O2", 600.0), ("O6", 1030.0)):
        em = cfg.topology.operators[o].emission
        assert (em.sim, em.live, em.items_per_incident) == (EmissionMode.ratio, EmissionMode.incident, items)
    for o in ("O1", "O3", "O4", "O5", "O7", "O8", "O9"):
        em = cfg.topology.operators[o].emission
        assert (em.sim, em.live) == (EmissionMode.ratio, EmissionMode.ratio)
    assert (cfg.runtime.sampling, cfg.runtime.sample_every) == (Sampling.probabilistic, 10)  # btu: paper_calibrated
    plain = compose_config("profile=paper")
    assert (plain.runtime.sampling, plain.runtime.sample_every) == (Sampling.every_nth, 10)


def test_the_incident_parameters_are_the_providers():
    payloads = PayloadConfig()
    cfg = compose_config()
    sources = cfg.topology.sources
    assert items_per_incident(payloads, AVAILABILITY, sources["S1_availability"].items_per_tick) == \
        pytest.approx(cfg.topology.operators["O2"].emission.items_per_incident)
    assert items_per_incident(payloads, TEMPERATURE, sources["S3_temperature"].items_per_tick) == \
        pytest.approx(cfg.topology.operators["O6"].emission.items_per_incident)
    with pytest.raises(ValueError):
        items_per_incident(payloads, "production", 1)


def test_the_providers_readings_open_incidents_at_that_rate():
    """The live operators' rule (a reading in incident after one that was not) over the provider's
    seeded machines: the readings per new incident are near the configured means."""
    readings = {AVAILABILITY: 0, TEMPERATURE: 0}
    opened = {AVAILABILITY: 0, TEMPERATURE: 0}
    for m in range(4):
        machine = Machine(m, seed=11)
        active = {AVAILABILITY: False, TEMPERATURE: False}
        for _ in range(6000):
            machine.step()
            states = {AVAILABILITY: [r["status"] == DEFECT for r in machine.availability(0, 1.0, 5)],
                      TEMPERATURE: [r["temperature_c"] > 85.0 for r in machine.temperature(0, 1.0, 10)]}
            for kind, flags in states.items():
                for flag in flags:
                    readings[kind] += 1
                    opened[kind] += flag and not active[kind]
                    active[kind] = flag
    assert readings[AVAILABILITY] / opened[AVAILABILITY] == pytest.approx(600, rel=0.25)
    assert readings[TEMPERATURE] / opened[TEMPERATURE] == pytest.approx(1030, rel=0.3)


@pytest.mark.parametrize("override, key", [
    ("topology.operators.O2.emission.sim=incident topology.operators.O2.emission.items_per_incident=0",
     "topology.operators.O2.emission.items_per_incident"),
    ("topology.operators.O6.emission.items_per_incident=-5", "topology.operators.O6.emission.items_per_incident"),
    ("topology.operators.O8.emission.sim=incident topology.operators.O8.emission.items_per_incident=10",
     "topology.operators.O8.emission.sim"),
    ("backend=docker topology.operators.O3.emission.live=incident", "topology.operators.O3.emission.live"),
    ("backend=docker topology.operators.O2.emission.live=ratio topology.operators.O2.ratio_out=2",
     "topology.operators.O2.ratio_out"),
    ("runtime.sample_every=0", "runtime.sample_every"),
])
def test_bad_values_fail_at_load_naming_the_key(override, key):
    with pytest.raises(ConfigError) as err:
        compose_config(*override.split())
    assert str(err.value).startswith(key)


@pytest.mark.parametrize("override, key", [
    ("topology.operators.O2.emission.sim=sometimes", "sim"),
    ("topology.operators.O6.emission.live=always", "live"),
    ("runtime.sampling=every_other", "sampling"),
])
def test_unknown_modes_fail_at_composition_naming_the_key(override, key):
    with pytest.raises((ConfigCompositionException, ValidationError)) as err:
        compose_config(override)
    assert key in str(err.value) or key in str(err.value.__cause__)


def test_the_manifest_records_what_the_backend_applies():
    sim = measurement_settings(compose_config())
    assert sim["latency_sampling"] == {"rule": "probabilistic", "every": 10, "measurement": "seconds_truncated"}
    assert sim["emission"]["O2"] == {"mode": "ratio", "ratio": "50:1"}
    assert sim["emission"]["O6"] == {"mode": "ratio", "ratio": "100:1"}
    live = measurement_settings(compose_config("backend=docker", "runtime.sampling=every_nth"))
    assert live["latency_sampling"]["rule"] == "every_nth"
    assert live["emission"]["O2"] == {"mode": "incident"} and live["emission"]["O9"] == {"mode": "ratio",
                                                                                          "ratio": "300:1"}
    mimic = measurement_settings(compose_config("topology.operators.O6.emission.sim=incident"))
    assert mimic["emission"]["O6"] == {"mode": "incident", "items_per_incident": 1030.0}
    assert measurement_settings(compose_config("evaluation=daedalus")) == {}  # job mode: its own sampling


def test_the_live_emission_is_a_live_setting_of_the_settings_digest():
    base = settings_digest(compose_config())
    assert settings_digest(compose_config("topology.operators.O2.emission.live=ratio")) == base
    assert settings_digest(compose_config("topology.operators.O2.emission.sim=incident")) != base


# ---- the incident process ------------------------------------------------------------------------

def test_incident_process_is_seeded_additive_and_independent():
    ops = ["A", "B"]
    one = IncidentProcess(ops, {"A": 50.0}, seed=5)
    both = IncidentProcess(ops, {"A": 50.0, "B": 20.0}, seed=5)
    chunks = [3, 700, 1, 0, 4000, 296]
    a = [one.take(0, n) for n in chunks]
    assert a == [both.take(0, n) for n in chunks]  # B's stream does not move A's
    assert sum(a) == IncidentProcess(ops, {"A": 50.0}, seed=5).take(0, sum(chunks))  # chunking changes nothing
    assert a != [IncidentProcess(ops, {"A": 50.0}, seed=6).take(0, n) for n in chunks]
    assert not one.on(1) and both.on(1)
    with pytest.raises(ValueError):
        one.take(1, 10)
    many = IncidentProcess(["A"], {"A": 600.0}, seed=1).take(0, 3_000_000)
    assert many == pytest.approx(5000, rel=0.05)  # 1 in 600 on average
    assert IncidentProcess(["A"], {"A": 1.0}, seed=1).take(0, 77) == 77  # every input opens one


@pytest.mark.parametrize("exact", [False, True])
def test_simulated_filters_emit_per_incident_or_by_ratio(exact):
    model = (f"backend.exact={str(exact).lower()}",)
    _, ratio_tables, _ = simulate(*model)
    processed, edges = totals(ratio_tables)
    assert abs(edges[("O2", "O8")] - processed["O2"] / 50) <= 1  # the default: 1 in 50, 1 in 100
    assert abs(edges[("O6", "O8")] - processed["O6"] / 100) <= 1
    incident = ("topology.operators.O2.emission.sim=incident", "topology.operators.O6.emission.sim=incident",
                "topology.operators.O2.emission.items_per_incident=300")
    sim, tables, run_cfg = simulate(*model, *incident)
    processed, edges = totals(tables)
    fresh = IncidentProcess.of(sim.topology, 3)  # the same seeded draws, counted over all the inputs at once
    k2, k6 = sim.topology.operators.index("O2"), sim.topology.operators.index("O6")
    assert edges[("O2", "O8")] == fresh.take(k2, processed["O2"]) > 0
    assert edges[("O6", "O8")] == fresh.take(k6, processed["O6"])
    assert edges[("O2", "O8")] < processed["O2"] / 100  # about 1 in 300, far below 1 in 50
    # the rest of the topology is untouched by the filters' mode
    assert totals(ratio_tables)[1][("O1", "O3")] == edges[("O1", "O3")]


# ---- latency sampling ----------------------------------------------------------------------------

def test_sampling_rules_in_the_simulator():
    every = SampleRecorder(["A"], [0.0], 10, Sampling.every_nth, Measurement.milliseconds, seed=1)
    picked = every.take(0, 1000)
    assert picked == list(range(9, 1000, 10))  # every 10th
    prob = SampleRecorder(["A"], [0.0], 10, Sampling.probabilistic, Measurement.milliseconds, seed=1)
    n = sum(len(prob.take(0, 1000)) for _ in range(100))
    assert n == pytest.approx(10_000, rel=0.05)  # each with probability 1/10
    gaps = np.diff(prob.take(0, 100_000))
    assert gaps.min() >= 1 and len(set(gaps.tolist())) > 10  # not a fixed stride
