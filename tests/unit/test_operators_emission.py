"""The live side of the settings that used to differ silently from the simulator
(docs/architecture.md#emission, #latency-sampling), without a broker or Redis: O2 and O6 pass
every N-th input in ratio mode and warn per new incident by default; the runner samples by
`SAMPLING` as the simulator does; the live runtime hands both settings to the containers. The Lua
scripts themselves run against a real Redis in tests/integration/test_operator_state.py."""
from __future__ import annotations

import json
from typing import Dict

import pytest
import redis

from operators.api import OperatorContext
from operators.envelope import Envelope
from operators.metrics import Metrics
from operators.oee.availability_filter import AvailabilityFilter
from operators.oee.emission import INCIDENT_OPERATORS
from operators.oee.params import OperatorParamError
from operators.oee.records import IncidentWarning
from operators.oee.temperature_monitor import TemperatureMonitor
from operators.registry import make_operator
from operators.runner_config import ConfigError, config_from_env


def ctx(op: str, **params) -> OperatorContext:
    """A real client that never connects: building an operator only registers its scripts."""
    return OperatorContext(op, f"{op}-test", "run1", redis.Redis(host="127.0.0.1", port=1), params)


class CountingStub:
    """What ``EveryNth`` does in Redis, in memory: the type's inputs counted once per id."""

    def __init__(self, every_n: int):
        self.every_n = every_n
        self.k = 0
        self.seen: Dict[str, int] = {}

    def count(self, item_id: str) -> int:
        if item_id in self.seen:
            return self.seen[item_id]
        self.k += 1
        if self.k % self.every_n == 0:
            self.seen[item_id] = self.k
            return self.k
        return 0


class TrackerStub:
    """What ``IncidentTracker`` does in Redis, in memory (in-order readings)."""

    def __init__(self):
        self.active: Dict[str, bool] = {}
        self.incidents: Dict[str, int] = {}

    def apply(self, item_id: str, machine: str, in_incident: bool, ts: int) -> int:
        opened = 0
        if in_incident and not self.active.get(machine, False):
            self.incidents[machine] = opened = self.incidents.get(machine, 0) + 1
        self.active[machine] = in_incident
        return opened


def availability(k: int, status: str, machine: str = "machine-01") -> Envelope:
    return Envelope(f"{machine}/S1/{k}", machine, "availability", 1000 + k, 1001 + k,
                    {"machine_id": machine, "status": status, "timestamp_ms": 1000 + k})


def temperature(k: int, value: float, machine: str = "machine-01") -> Envelope:
    return Envelope(f"{machine}/S3/{k}", machine, "temperature", 1000 + k, 1001 + k,
                    {"machine_id": machine, "temperature_c": value, "timestamp_ms": 1000 + k})


def test_the_filters_warn_per_new_incident_by_default():
    o2 = AvailabilityFilter(ctx("O2"))
    assert (o2.params.emission, o2.params.every_n, o2.nth) == ("incident", 50, None)
    o2.tracker = TrackerStub()  # type: ignore[assignment]
    statuses = ["available", "defect", "defect", "available", "defect", "planned downtime"] * 20
    out = [e for k, s in enumerate(statuses) for e in o2.process(availability(k, s))]
    assert len(out) == 40  # two new defects per six readings
    first = IncidentWarning(**out[0].payload)
    assert (first.kind, first.incident, out[0].item_id) == ("defect", 1, "machine-01/S1/1/O2")
    o6 = TemperatureMonitor(ctx("O6"))
    assert (o6.params.emission, o6.params.every_n) == ("incident", 100)
    o6.tracker = TrackerStub()  # type: ignore[assignment]
    values = [70.0, 92.0, 93.0, 84.0, 91.0]
    assert [len(o6.process(temperature(k, v))) for k, v in enumerate(values)] == [0, 1, 0, 0, 1]


@pytest.mark.parametrize("cls, item", [(AvailabilityFilter, lambda k: availability(k, "available")),
                                       (TemperatureMonitor, lambda k: temperature(k, 70.0))])
def test_ratio_mode_passes_every_nth_input_whatever_its_value(cls, item):
    op = cls(ctx("O2" if cls is AvailabilityFilter else "O6", emission="ratio", every_n=50))
    assert op.nth is not None and op.nth.every_n == 50
    op.nth = CountingStub(50)
    op.tracker = None  # the incident rule is not consulted
    out = [(k, e) for k in range(1000) for e in op.process(item(k))]
    assert [k for k, _ in out] == list(range(49, 1000, 50))  # the 50th, 100th, ...: 20 of 1000, as 50:1
    k, e = out[0]
    assert IncidentWarning(**e.payload).incident == 50 and e.item_id.endswith(f"/{k}/{op.ctx.operator}")
    again = op.process(item(49))  # a redelivered emitting input emits the same item again
    assert [x.item_id for x in again] == [e.item_id]


@pytest.mark.parametrize("params, key", [({"emission": "sometimes"}, "emission"), ({"every_n": 0}, "every_n"),
                                         ({"emission": "ratio", "every_n": "50"}, "every_n")])
@pytest.mark.parametrize("op", sorted(INCIDENT_OPERATORS))
def test_bad_emission_params_name_the_key(op, params, key):
    with pytest.raises(OperatorParamError) as err:
        make_operator(op, ctx(op, **params))
    assert err.value.key == key and f"{op}.params.{key}" in str(err.value)


def test_the_incident_operators_are_the_registrys_filters():
    for op in INCIDENT_OPERATORS:
        assert make_operator(op, ctx(op, emission="ratio")).nth is not None


# ---- latency sampling ----------------------------------------------------------------------------

def sampled(metrics: Metrics, n: int) -> list:
    return [k for k in range(n) if metrics.completed(0, None, 10) is not None]


def test_the_runner_samples_every_nth_item_by_default():
    m = Metrics("run1", "O3", "O3-1", sample_every=10)
    assert m.sampling == "every_nth"
    assert sampled(m, 1000) == list(range(0, 1000, 10))


def test_probabilistic_sampling_is_seeded_per_instance_and_about_one_in_n():
    picks = sampled(Metrics("run1", "O3", "O3-1", 10, sampling="probabilistic"), 20_000)
    assert len(picks) == pytest.approx(2000, rel=0.1)
    assert picks != list(range(0, 20_000, 10))
    assert picks == sampled(Metrics("run1", "O3", "O3-1", 10, sampling="probabilistic"), 20_000)
    assert picks != sampled(Metrics("run1", "O3", "O3-2", 10, sampling="probabilistic"), 20_000)
    with pytest.raises(ValueError):
        Metrics("run1", "O3", "O3-1", 10, sampling="sometimes")


def test_the_sampling_variable():
    base = {"OPERATOR": "O3", "RUN_PREFIX": "run-1"}
    assert config_from_env(base).sampling == "every_nth"
    assert config_from_env({**base, "SAMPLING": "probabilistic"}).sampling == "probabilistic"
    with pytest.raises(ConfigError) as err:
        config_from_env({**base, "SAMPLING": "every_other"})
    assert err.value.variable == "SAMPLING"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # kafka-python's import
def test_the_live_runtime_hands_both_settings_to_the_containers():
    from operators.wiring import wiring_for
    from testbed.live.run import operator_environment
    from tests.conftest import compose_config

    cfg = compose_config("backend=docker", "runtime.sampling=probabilistic", "runtime.sample_every=20")
    wiring = wiring_for(cfg.topology, "p")
    o2 = operator_environment(cfg, wiring, "O2", cfg.runtime.sample_every)
    assert (o2["SAMPLING"], o2["SAMPLE_EVERY"]) == ("probabilistic", "20")
    assert json.loads(o2["OPERATOR_PARAMS"]) == {"emission": "incident", "every_n": 50}
    assert "OPERATOR_PARAMS" not in operator_environment(cfg, wiring, "O3", 10)
    ratio = compose_config("backend=docker", "topology.operators.O6.emission.live=ratio")
    o6 = operator_environment(ratio, wiring_for(ratio.topology, "p"), "O6", 10)
    assert json.loads(o6["OPERATOR_PARAMS"]) == {"emission": "ratio", "every_n": 100}
    assert operator_environment(ratio, wiring, "O6", 10)["SAMPLING"] == "probabilistic"  # btu: paper_calibrated
    config_from_env(o6)  # what the container reads back is valid
    every = compose_config("backend=docker", "profile=paper")
    assert operator_environment(every, wiring, "O3", 10)["SAMPLING"] == "every_nth"
