"""Sensor payload generators: seeded, plausible (docs/papers/btu-provisioning.md#visp-data-provider
asks for plausible values where VISP's were meaningless)."""
from __future__ import annotations

import collections
import dataclasses

import numpy as np
import pytest

from testbed.workloads.payloads import (
    AVAILABLE,
    DEFECT,
    PLANNED_DOWNTIME,
    STATUSES,
    Machine,
    PayloadConfig,
    PayloadConfigError,
    validate_payloads,
)


def run_machine(seed: int, ticks: int, index: int = 0):
    m = Machine(index, seed)
    statuses, temps, records, excursion = [], [], [], []
    for k in range(ticks):
        m.step()
        statuses.append(m.status)
        temps.append([p["temperature_c"] for p in m.temperature(k * 480, 48.0, 10)])
        excursion.append(m.in_excursion)
        records.append(m.production(k * 480))
    return statuses, np.array(temps), records, np.array(excursion)


def test_same_seed_same_readings_other_seed_others():
    a = run_machine(7, 200)
    b = run_machine(7, 200)
    c = run_machine(8, 200)
    assert a[0] == b[0] and np.array_equal(a[1], b[1]) and a[2] == b[2]
    assert not np.array_equal(a[1], c[1])


def test_machines_have_independent_streams():
    m0, m1 = Machine(0, 1), Machine(1, 1)
    assert m0.machine_id == "machine-01" and m1.machine_id == "machine-02"
    for m in (m0, m1):
        m.step()
    assert m0.temperature(0, 48, 10) != m1.temperature(0, 48, 10)


def test_availability_shares_and_incidents_last_several_ticks():
    statuses, _, _, _ = run_machine(3, 40_000)
    shares = collections.Counter(statuses)
    assert set(shares) == set(STATUSES)
    assert shares[AVAILABLE] / len(statuses) == pytest.approx(0.90, abs=0.02)
    assert shares[PLANNED_DOWNTIME] / len(statuses) == pytest.approx(0.05, abs=0.015)
    assert shares[DEFECT] / len(statuses) == pytest.approx(0.05, abs=0.015)
    runs = collections.defaultdict(list)  # incident lengths in ticks
    length = 1
    for prev, cur in zip(statuses, statuses[1:], strict=False):
        if cur == prev:
            length += 1
        else:
            runs[prev].append(length)
            length = 1
    assert np.mean(runs[PLANNED_DOWNTIME]) == pytest.approx(10, rel=0.25)
    assert np.mean(runs[DEFECT]) == pytest.approx(6, rel=0.25)


def test_temperature_drifts_and_crosses_the_threshold_only_in_excursions():
    _, temps, _, excursion = run_machine(5, 20_000)
    threshold = PayloadConfig().temperature.threshold_c
    normal, hot = temps[~excursion], temps[excursion]
    assert 0.01 < excursion.mean() < 0.06
    assert normal.mean() == pytest.approx(70, abs=1)
    assert (normal > threshold).mean() < 1e-4
    assert (hot > threshold).mean() > 0.9
    # a drift, not white noise: consecutive readings are strongly correlated
    flat = normal.ravel()
    assert np.corrcoef(flat[:-1], flat[1:])[0, 1] > 0.9


def test_production_records_are_plausible():
    statuses, _, records, _ = run_machine(11, 5000)
    produced = np.array([r.produced_units for r in records])
    defective = np.array([r.defective_units for r in records])
    assert all(r.status == s for r, s in zip(records, statuses, strict=True))
    up = np.array([s == AVAILABLE for s in statuses])
    assert produced[~up].sum() == 0 and defective[~up].sum() == 0
    assert 40 <= produced[up].mean() <= 50  # ideal 50 per minute at ~90 % performance
    assert defective.sum() / produced.sum() == pytest.approx(0.02, abs=0.005)
    assert (defective <= produced).all()
    planned = {r.status: r.planned_production_time_s for r in records}
    assert planned == {AVAILABLE: 60, DEFECT: 60, PLANNED_DOWNTIME: 0}
    r = records[0]
    assert (r.machine_id, r.machine_type, r.location) == ("machine-01", "injection moulding", "hall 1 line 1")


def test_timestamps_are_milliseconds_spaced_within_the_tick():
    m = Machine(0, 1)
    m.step()
    items = m.availability(1_763_788_800_000, 96.0, 5)
    assert [i["timestamp_ms"] for i in items] == [1_763_788_800_000 + 96 * k for k in range(5)]
    assert {i["status"] for i in items} == {m.status}


def test_invalid_model_values_name_the_key():
    cfg = PayloadConfig()
    cfg.availability.share_defect = 1.5
    with pytest.raises(PayloadConfigError, match="payloads.availability.share_defect"):
        validate_payloads(cfg)
    cfg = PayloadConfig()
    cfg.temperature.reversion = 0
    with pytest.raises(PayloadConfigError, match="payloads.temperature.reversion"):
        validate_payloads(cfg)


def test_the_operators_production_record_is_the_displays_record_plus_its_id():
    """The OEE operators (their images hold `operators/` alone, so they cannot import the workload)
    declare the production record again; the two declarations must agree field by field, in the
    display's line order, with the same types and statuses."""
    from operators.oee import records as operator_side
    from testbed.workloads import payloads as display_side

    def fields(cls):
        return [(f.name, f.type) for f in dataclasses.fields(cls)]

    assert fields(operator_side.ProductionRecord) == \
        [("record_id", "str"), *fields(display_side.ProductionRecord)]
    assert operator_side.STATUSES == display_side.STATUSES
    shown = display_side.Machine(0, seed=1).production(1_000)
    parsed = operator_side.ProductionRecord.from_payload({"record_id": "r1", **dataclasses.asdict(shown)})
    assert dataclasses.asdict(parsed) == {"record_id": "r1", **dataclasses.asdict(shown)}
