"""The CPU a run does not get on a shared machine, beyond its own demand: a per-item wait for a CPU
(`service.wait_ms`, holding the slot but no core) and other processes' runnable threads competing
for the shared cores (`backend.competing_threads`), in the cohort model's `_shared_factor`."""
from __future__ import annotations

import pytest

from testbed.arguments import ConfigError
from testbed.config import Measurement, OperatorConfig, Sampling, ServiceConfig, SourceConfig, TopologyConfig
from testbed.sim.network import CohortNetwork
from testbed.sim.recorder import SampleRecorder
from testbed.topology import Topology
from tests.conftest import compose_config
from tests.unit.test_shared_cores import CPU, HOSTS, SERVICE_S, TICK_S, same
from tests.unit.test_shared_cores import TOPOLOGY as TOPOLOGY_WORK
from tests.unit.test_shared_cores import run as run_shared
from tests.unit.test_simulator import frame, simulate


def test_no_competing_threads_is_todays_sharing_to_the_bit():
    same(run_shared(3.0, 45, minutes=2), run_competing(3.0, 0.0, 45, minutes=2))


def test_competing_threads_take_their_share_of_a_saturated_machine():
    """8 busy slots need 4 cores, 4 other threads want 4 more: on 4 cores every thread gets half a
    core's worth, so the run does 2 cores of work, 2 / (0.5 x 40 ms) = 100 items/s."""
    _, _, rate, _ = run_competing(4.0, 4.0, 60)
    assert rate == pytest.approx(4.0 * 4.0 / 8.0 / (CPU * SERVICE_S), rel=0.03)


def test_competing_threads_slow_a_run_that_fits_its_cores():
    """45 items per tick need 3.75 of 4 cores: alone the run keeps up (today's sharing changes
    nothing); beside 2 busy threads the 8 saturated slots and those 2 share the 4 cores, 4 x 4 / 6
    cores of work: 133 items/s of the 187.5 that arrive, and the queues grow."""
    _, _, alone, _ = run_competing(4.0, 0.0, 45, minutes=2)
    _, _, rate, growth = run_competing(4.0, 2.0, 45, minutes=2)
    assert alone == pytest.approx(2 * 45 / TICK_S, rel=0.01)
    assert rate == pytest.approx(4.0 * 4.0 / 6.0 / (CPU * SERVICE_S), rel=0.03)
    assert all(g > 500 for g in growth)


def run_competing(shared: float, competing: float, per_tick: int, minutes: float = 4.0):
    return _run(TOPOLOGY_WORK, SERVICE_S, shared, per_tick, minutes, competing)


WAIT_S = 0.02  # of a 40 ms slot time, half is a wait for a CPU
TOPOLOGY_WAIT = Topology.from_config(TopologyConfig(
    tick_ms=TICK_S * 1000, compliance_excluded=[],
    sources={"S": SourceConfig(items_per_tick=1, downstream=["A", "B"])},
    operators={o: OperatorConfig(slo_ms=500, service=ServiceConfig(
        mean_ms=(SERVICE_S - WAIT_S) * 1000, wait_ms=WAIT_S * 1000, cv=0.3, cpu_cores=CPU)) for o in ("A", "B")},
))


def _run(topology: Topology, slot_s: float, shared: float, per_tick: int, minutes: float, competing: float = 0.0):
    """As test_shared_cores.run, on any topology of A and B: a constant load, each slot `slot_s` long."""
    rec = SampleRecorder(topology.operators, [0.3, 0.3], 1, Sampling.every_nth, Measurement.milliseconds, 3)
    net = CohortNetwork(topology, 0.005, rec)
    net.set_shared_cores(shared, competing)
    slots = {o: HOSTS for o in topology.operators}
    names = {o: [f"{o}-{h}" for h in range(HOSTS)] for o in topology.operators}
    half = {}
    steps = int(minutes * 60 / TICK_S)
    for k in range(steps):
        t0 = k * TICK_S
        for o in topology.operators:
            net.send("S", o, t0, per_tick)
        net.advance(t0, t0 + TICK_S, slots, {o: slot_s for o in topology.operators}, names)
        if k == steps // 2:
            half = {o: (net.processed(o), net.depth(o)) for o in topology.operators}
    span = (steps - 1 - steps // 2) * TICK_S
    rate = sum(net.processed(o) - half[o][0] for o in topology.operators) / span
    return net, rec, rate, [net.depth(o) - half[o][1] for o in topology.operators]


def test_a_wait_for_a_cpu_holds_the_slot_but_no_core():
    """Slots of 40 ms, half of it work: 8 saturated slots need 8 x 0.5 x 20/40 = 2 cores, so 2 shared
    cores serve them at full speed (200 items/s); were the 40 ms all work, they would do half that."""
    _, _, waiting, _ = _run(TOPOLOGY_WAIT, SERVICE_S, 2.0, 60, 2.0)
    _, _, working, _ = _run(TOPOLOGY_WORK, SERVICE_S, 2.0, 60, 2.0)
    assert waiting == pytest.approx(2 * HOSTS / SERVICE_S, rel=0.03)
    assert working == pytest.approx(2.0 / (CPU * SERVICE_S), rel=0.03)


def test_the_wait_is_stretched_like_the_work_on_a_crowded_machine():
    """On 1 core the same slots need 2: every busy slot, wait and work alike, takes twice as long."""
    _, _, rate, _ = _run(TOPOLOGY_WAIT, SERVICE_S, 1.0, 60, 2.0)
    assert rate == pytest.approx(2 * HOSTS / SERVICE_S / 2.0, rel=0.03)


def test_the_slot_time_is_work_and_wait_and_only_the_work_varies():
    svc = ServiceConfig(mean_ms=30.0, wait_ms=10.0, cv=0.4)
    assert svc.slot_ms == 40.0 and svc.slot_cv == pytest.approx(0.3)
    assert ServiceConfig(mean_ms=30.0, cv=0.4).slot_ms == 30.0 and ServiceConfig(mean_ms=30.0, cv=0.4).slot_cv == 0.4


def test_a_simulated_operator_holds_its_items_for_the_wait():
    common = ("policy=threshold", "profile=paper", "pattern=constant", "pattern.levels=[2]", "duration_min=4")
    free, _, _ = simulate(*common)
    waits, _, _ = simulate(*common, "topology.operators.O1.service.wait_ms=300")
    o1 = lambda r: frame(r, "samples").query("operator == 'O1'").duration_ms.mean()  # noqa: E731
    assert o1(waits) > o1(free) + 250


def test_both_default_to_none():
    cfg = compose_config()
    assert cfg.backend.competing_threads == 0.0
    assert all(op.service.wait_ms == 0.0 for op in cfg.topology.operators.values())


@pytest.mark.parametrize("overrides, key, message", [
    (["backend.shared_cores=2", "backend.competing_threads=-1"], "backend.competing_threads", ">= 0"),
    (["backend.shared_cores=2", "backend.competing_threads=inf"], "backend.competing_threads", ">= 0"),
    (["backend.competing_threads=3"], "backend.competing_threads", "backend.shared_cores > 0"),
    (["topology.operators.O1.service.wait_ms=-5"], "topology.operators.O1.service.wait_ms", ">= 0"),
    (["topology.operators.O1.service.wait_ms=nan"], "topology.operators.O1.service.wait_ms", ">= 0"),
])
def test_bad_values_fail_at_load_naming_the_key(overrides, key, message):
    with pytest.raises(ConfigError, match=message) as err:
        compose_config(*overrides)
    assert err.value.key == key


def test_the_shipped_quiet_profile_carries_the_waits_and_no_competing_threads(tmp_path):
    """live_quiet: measured on a quiet machine, so it describes none of another load's threads; a
    loaded machine's are given beside it (backend.competing_threads)."""
    cfg = compose_config("profile=live_quiet", f"out={tmp_path}")
    assert cfg.backend.shared_cores == 2.0 and cfg.backend.competing_threads == 0.0
    waits = {o: op.service.wait_ms for o, op in cfg.topology.operators.items()}
    assert all(w > 0 for w in waits.values()) and waits["O1"] > 10 * cfg.topology.operators["O3"].service.wait_ms
    assert compose_config("profile=live_quiet", "backend.competing_threads=3.45").backend.competing_threads == 3.45
