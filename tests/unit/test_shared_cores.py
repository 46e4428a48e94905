"""backend.shared_cores: every instance of a run shares the machine's cores (processor sharing in the
cohort model, testbed/sim/network.py `_shared_factor`)."""
from __future__ import annotations

import numpy as np
import pytest
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ValidationError

from testbed.arguments import ConfigError
from testbed.config import (
    Measurement,
    OperatorConfig,
    Sampling,
    ServiceConfig,
    SourceConfig,
    TopologyConfig,
    to_plain,
    validate,
)
from testbed.sim.network import CohortNetwork
from testbed.sim.recorder import SampleRecorder
from testbed.topology import Topology
from tests.conftest import compose_config
from tests.unit.test_simulator import frame, simulate

TICK_S = 0.48
SERVICE_S = 0.04
CPU = 0.5  # cores a busy slot needs
HOSTS = 4  # instances per operator, one per host: 2 operators x 4 single-slot instances = 8 slots

TOPOLOGY = Topology.from_config(TopologyConfig(
    tick_ms=TICK_S * 1000, compliance_excluded=[],
    sources={"S": SourceConfig(items_per_tick=1, downstream=["A", "B"])},
    operators={o: OperatorConfig(slo_ms=500, service=ServiceConfig(mean_ms=SERVICE_S * 1000, cv=0.3, cpu_cores=CPU))
               for o in ("A", "B")},
))


def run(shared: float, per_tick: int, minutes: float = 4.0, seed: int = 3):
    """A constant load of `per_tick` items per tick to each operator; the network and its recorder."""
    rec = SampleRecorder(TOPOLOGY.operators, [0.3, 0.3], 1, Sampling.every_nth, Measurement.milliseconds, seed)
    net = CohortNetwork(TOPOLOGY, 0.005, rec)
    net.set_shared_cores(shared)
    slots = {o: HOSTS for o in TOPOLOGY.operators}
    service = {o: SERVICE_S for o in TOPOLOGY.operators}
    names = {o: [f"{o}-{h}" for h in range(HOSTS)] for o in TOPOLOGY.operators}  # on hosts vm1..vm4
    half = {}
    steps = int(minutes * 60 / TICK_S)
    for k in range(steps):
        t0 = k * TICK_S
        for o in TOPOLOGY.operators:
            net.send("S", o, t0, per_tick)
        net.advance(t0, t0 + TICK_S, slots, service, names)
        if k == steps // 2:
            half = {o: (net.processed(o), net.depth(o)) for o in TOPOLOGY.operators}
    span = (steps - 1 - steps // 2) * TICK_S
    rate = sum(net.processed(o) - half[o][0] for o in TOPOLOGY.operators) / span
    growth = [net.depth(o) - half[o][1] for o in TOPOLOGY.operators]
    return net, rec, rate, growth


def test_twice_the_cores_saturates_the_machine():
    """All 8 slots busy need 4 cores; 2 shared: the run does 2 cores of work, 2 / (0.5 x 40 ms) =
    100 items/s in all (half of what the slots do alone), and the queues grow."""
    _, _, free_rate, free_growth = run(0.0, 60)
    _, _, rate, growth = run(2.0, 60)
    assert free_rate == pytest.approx(2 * HOSTS / SERVICE_S, rel=0.03)  # 200/s: each slot saturated
    assert rate == pytest.approx(2.0 / (CPU * SERVICE_S), rel=0.03)
    assert all(g > 1000 for g in growth) and sum(growth) > 2.5 * sum(free_growth)  # 150/s vs 50/s


def same(a, b):
    net_a, rec_a = a[:2]
    net_b, rec_b = b[:2]
    assert rec_a.duration_ms == rec_b.duration_ms and rec_a.t == rec_b.t
    assert [net_a.processed(o) for o in TOPOLOGY.operators] == [net_b.processed(o) for o in TOPOLOGY.operators]


def test_enough_cores_change_nothing():
    """Saturated slots needing 4 cores on 4 (or 64) shared cores: exactly the run without sharing."""
    off = run(0.0, 60, minutes=2)
    same(run(4.0, 60, minutes=2), off)
    same(run(64.0, 60, minutes=2), off)


def test_demand_just_under_the_cores_changes_nothing():
    """45 items per tick per operator: 2 x 45 x 40 ms x 0.5 cores / 480 ms = 3.75 cores of 4."""
    off = run(0.0, 45, minutes=2)
    assert off[2] == pytest.approx(2 * 45 / TICK_S, rel=0.01)
    same(run(4.0, 45, minutes=2), off)
    _, _, rate, _ = run(3.0, 45, minutes=2)  # and under 3 cores it saturates at 3 / (0.5 x 40 ms)
    assert rate == pytest.approx(3.0 / (CPU * SERVICE_S), rel=0.03)


def test_a_simulated_run_slows_when_its_hosts_share_few_cores():
    common = ("policy=threshold", "profile=paper", "pattern=constant", "pattern.levels=[8]", "duration_min=8")
    free, _, cfg = simulate(*common)
    shared, _, shared_cfg = simulate(*common, "backend.shared_cores=0.3")
    o1 = lambda r: frame(r, "samples").query("operator == 'O1'").duration_ms.mean()  # noqa: E731
    assert o1(shared) > 1.2 * o1(free)
    assert to_plain(shared_cfg)["backend"]["shared_cores"] == 0.3 and to_plain(cfg)["backend"]["shared_cores"] == 0


@pytest.mark.parametrize("overrides, message", [
    (["backend.shared_cores=-1"], "must be a number >= 0"),
    (["backend.shared_cores=nan"], "must be a number >= 0"),
    (["backend.shared_cores=inf"], "must be a number >= 0"),
    (["backend.shared_cores=2", "backend.exact=true"], "backend.exact"),
    (["backend.shared_cores=2", "backend.emulation.enabled=true"], "emulat"),
])
def test_bad_values_fail_at_load_naming_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message) as err:
        compose_config(*overrides)
    assert err.value.key == "backend.shared_cores"


def test_a_non_number_fails_at_load_naming_the_key():
    """The typed schema rejects it while composing (as test_config's wrong types)."""
    with pytest.raises((ConfigCompositionException, ValidationError)) as err:
        compose_config("backend.shared_cores=many")
    assert "backend.shared_cores" in str(err.value) + str(err.value.__cause__)


def test_a_non_number_in_a_typed_config_fails_the_check():
    cfg = compose_config()
    cfg.backend.shared_cores = "2"  # type: ignore[assignment]
    with pytest.raises(ConfigError, match="backend.shared_cores: must be a number"):
        validate(cfg)


def test_off_by_default_and_zero_is_allowed():
    assert compose_config().backend.shared_cores == 0.0
    assert compose_config("backend.shared_cores=2").backend.shared_cores == 2.0
    assert np.isclose(compose_config("backend.shared_cores=0").backend.shared_cores, 0.0)
