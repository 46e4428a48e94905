"""The cohort model against the exact per-item model on a small scenario (issue acceptance):
a three-operator chain, 10 simulated minutes, a load step at 5 min, instances added 30 s later."""
from __future__ import annotations

import numpy as np
import pytest

from testbed.config import Measurement, OperatorConfig, Sampling, ServiceConfig, SourceConfig, TopologyConfig
from testbed.sim.exact import ExactNetwork
from testbed.sim.network import CohortNetwork
from testbed.sim.recorder import SampleRecorder
from testbed.topology import Topology

TICK_S = 0.48
SLO_MS = {"A": 300.0, "B": 400.0, "C": 200.0}


def chain(cv: float) -> Topology:
    return Topology.from_config(TopologyConfig(
        tick_ms=TICK_S * 1000, sources={"S": SourceConfig(items_per_tick=10, downstream=["A"])},
        operators={
            "A": OperatorConfig(slo_ms=SLO_MS["A"], downstream=["B"], service=ServiceConfig(mean_ms=40, cv=cv)),
            "B": OperatorConfig(slo_ms=SLO_MS["B"], downstream=["C"], ratio_in=2, ratio_out=1,
                                service=ServiceConfig(mean_ms=60, cv=cv, parallel=2)),
            "C": OperatorConfig(slo_ms=SLO_MS["C"], service=ServiceConfig(mean_ms=15, cv=cv)),
        },
        compliance_excluded=[],
    ))


def simulate(network_cls, seed: int, cv: float = 0.3):
    """4 machines, 9 from minute 5; instances scaled up at 5.5 min. Returns (durations, operators)."""
    topo = chain(cv)
    rec = SampleRecorder(topo.operators, [cv] * 3, 1, Sampling.every_nth, Measurement.milliseconds, seed)
    net = network_cls(topo, 0.005, rec)
    service_s = {o: topo.configs[o].service.mean_ms / 1000 for o in topo.operators}
    for k in range(int(600 / TICK_S)):
        t0 = k * TICK_S
        net.send("S", "A", t0, (4 if t0 < 300 else 9) * 10)
        before = t0 < 330
        instances = {"A": 5 if before else 10, "B": 3 if before else 8, "C": 1 if before else 2}
        slots = {o: n * topo.configs[o].service.parallel for o, n in instances.items()}
        names = {o: [f"{o}-{i}" for i in range(n)] for o, n in instances.items()}
        net.advance(t0, t0 + TICK_S, slots, service_s, names)
    return np.array(rec.duration_ms), np.array(rec.operator)


def realtime_pct(durations: np.ndarray, operators: np.ndarray) -> float:
    slo = np.array([SLO_MS[o] for o in operators])
    return float((durations <= slo).mean() * 100)


@pytest.mark.slow
def test_deterministic_service_gives_the_same_schedule():
    """Without service variability the closed form reproduces the per-item FIFO schedule of the
    first operator exactly (same items, same start times); downstream only the spread differs."""
    cohort_d, cohort_o = simulate(CohortNetwork, seed=1, cv=0.0)
    exact_d, exact_o = simulate(ExactNetwork, seed=1, cv=0.0)
    a_c, a_e = cohort_d[cohort_o == "A"], exact_d[exact_o == "A"]
    assert len(a_c) == len(a_e)
    np.testing.assert_allclose(np.sort(a_c), np.sort(a_e), rtol=1e-9, atol=1e-6)
    assert abs(realtime_pct(cohort_d, cohort_o) - realtime_pct(exact_d, exact_o)) < 0.1


@pytest.mark.slow
def test_cohort_model_agrees_with_exact_model():
    """Within 1 percentage point of real-time compliance and 2 % of mean duration, averaged over
    three seeds (one seed of the exact model alone varies by about a point on this scenario)."""
    seeds = (1, 2, 3)
    cohort = [simulate(CohortNetwork, s) for s in seeds]
    exact = [simulate(ExactNetwork, s) for s in seeds]
    cohort_rt = np.mean([realtime_pct(d, o) for d, o in cohort])
    exact_rt = np.mean([realtime_pct(d, o) for d, o in exact])
    cohort_mean = np.mean([d.mean() for d, _ in cohort])
    exact_mean = np.mean([d.mean() for d, _ in exact])
    assert 20 < exact_rt < 90, "the scenario must be neither trivially compliant nor hopeless"
    assert abs(cohort_rt - exact_rt) <= 1.0, (cohort_rt, exact_rt)
    assert abs(cohort_mean - exact_mean) / exact_mean <= 0.02, (cohort_mean, exact_mean)
