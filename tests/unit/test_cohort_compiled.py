"""The compiled cohort model (issue 17): its stepping loop against the same loop in Python, the
random streams handed over from the recorder, and the arrays growing under a backlog. Bit-identity
with the model before compilation is tests/regression's."""
from __future__ import annotations

import numpy as np
import pytest

from testbed.config import Measurement, OperatorConfig, Sampling, ServiceConfig, SourceConfig, TopologyConfig
from testbed.rng import DrawBuffer, stream
from testbed.sim.clock import EPS, SourceTicks, StepClock, SteppedInPython
from testbed.sim.network import CohortNetwork
from testbed.sim.recorder import SampleRecorder
from testbed.topology import Topology
from testbed.workloads.patterns import CyclePattern

TOPOLOGY = Topology.from_config(TopologyConfig(
    tick_ms=480, compliance_excluded=[],
    sources={"S": SourceConfig(items_per_tick=10, downstream=["A"]),
             "T": SourceConfig(items_per_tick=3, downstream=["A", "C"])},
    operators={
        "A": OperatorConfig(slo_ms=300, downstream=["B", "C"], service=ServiceConfig(mean_ms=45, cv=0.5)),
        "B": OperatorConfig(slo_ms=400, ratio_in=3, ratio_out=1, service=ServiceConfig(mean_ms=70, cv=0.5, parallel=2)),
        "C": OperatorConfig(slo_ms=200, service=ServiceConfig(mean_ms=12, cv=0.5)),
    },
))
SERVICE_S = {o: TOPOLOGY.configs[o].service.mean_ms / 1000 for o in TOPOLOGY.operators}


def network(seed: int = 4, sampling: Sampling = Sampling.probabilistic) -> CohortNetwork:
    rec = SampleRecorder(TOPOLOGY.operators, [0.5] * 3, 3, sampling, Measurement.seconds_truncated, seed)
    net = CohortNetwork(TOPOLOGY, 0.02, rec)
    # 2, then 9 machines (a backlog at A), then 2 again: 4 minutes
    net.set_sources(StepClock(0.48, 240.0), SourceTicks.of_run(TOPOLOGY, CyclePattern("p", (2, 9, 2, 2), 60.0), 240.0))
    return net


def capacity(step: int):
    """Instances change every 100 steps (names as the cluster gives them)."""
    n = {"A": 4 + step // 100, "B": 2, "C": 1 + step // 200}
    instances = {o: [f"{o}-{10 * k + i}" for i in range(m)] for k, (o, m) in enumerate(n.items())}
    slots = {o: m * TOPOLOGY.configs[o].service.parallel for o, m in n.items()}
    return slots, SERVICE_S, instances


def record(net: CohortNetwork):
    flows = net.flows.take_interval()
    rec = net.recorder
    return (rec.t, rec.operator, rec.instance, rec.duration_ms, flows.received, flows.edges, flows.served,
            flows.busy_s, net.flows.latency_t, net.flows.latency_ms, [net.depth(o) for o in TOPOLOGY.operators])


@pytest.mark.slow
def test_compiled_stepping_equals_the_python_loop():
    """The compiled loop (ticks emitted inside, stopping at events) and the Python loop of the
    per-item model driving the same network step by step give identical samples and counts."""
    compiled, stepped = network(), network()
    for net, run in ((compiled, CohortNetwork.run), (stepped, SteppedInPython.run)):
        step = 0
        while step < net.clock.steps:
            net.set_capacity(*capacity(step))
            net._capacity = capacity(step)  # SteppedInPython's advance arguments
            stop_after = (step // 31 + 1) * 31 * 0.48 - EPS  # like a monitoring read every 31 steps
            step = run(net, step, stop_after, (step // 100 + 1) * 100 * 0.48)
        assert net.ticks_emitted == len(net.ticks.times)
    assert record(compiled) == record(stepped)
    assert len(compiled.recorder.t) > 1000 and compiled.flows.latency_t


def test_backlog_grows_the_arrays():
    """A long backlog needs more cohorts, draws and output room than the arrays start with."""
    net = network(sampling=Sampling.every_nth)
    slots = {"A": 1, "B": 2, "C": 1}
    net.set_capacity(slots, SERVICE_S, {o: [f"{o}-1"] for o in slots})
    assert net.run(0, float("inf"), float("inf")) == net.clock.steps
    assert net.q.count.shape[1] > 16 and net.sampling.noise.shape[1] >= 8192
    assert net.depth("A") > 10_000
    processed_a = net.processed("A")
    assert net.recorder.operator.count("A") == processed_a // 3  # every 3rd item sampled


def test_draw_buffer_hands_over_the_same_stream():
    rng_one, rng_two = stream(3, "x"), stream(3, "x")
    one = DrawBuffer(lambda n: rng_one.gamma(2.0, 0.5, n), block=100)
    two = DrawBuffer(lambda n: rng_two.gamma(2.0, 0.5, n), block=100)
    head = [one.next() for _ in range(30)]
    handed = np.concatenate([one.rest(), one.block(), one.block()])
    assert head + handed.tolist() == [two.next() for _ in range(300)]
