"""The live metrics reader's per-instance activity, emissions per operator, per-edge counts and
utilisation (the stream's older fields: tests/unit/test_live_monitor.py)."""
from __future__ import annotations

import pytest

from operators.topology import OEE_OPERATORS
from testbed.live.metrics_reader import InstanceActivity, edge_counts, parse_entries, utilisation


def count(instance: str, operator: str = "O1", **fields) -> tuple:
    return ("1-0", {"operator": operator, "instance": instance, "kind": "count", "t_ms": "1", **fields})


def test_count_entries_add_up_per_instance_and_emissions_per_operator():
    entries = [
        count("c1", processed="10", dead="1", emitted="30", busy_ms="950"),
        (b"1-1", {b"operator": b"O1", b"instance": b"c1", b"kind": b"count", b"t_ms": b"2", b"processed": b"5",
                  b"dead": b"0", b"emitted": b"15", b"busy_ms": b"1000"}),
        count("c2", processed="4", dead="0", emitted="12", busy_ms="400"),
        count("c9", "O7", processed="3", dead="0"),  # an older writer: no emitted / busy_ms
        count("c1", processed="1", dead="0", emitted="-1", busy_ms="5"),  # malformed: skipped whole
        count("c1", processed="1", dead="0", emitted="3", busy_ms="2.5"),
        ("2-0", {"operator": "O1", "instance": "c1", "kind": "sample", "t_ms": "1000", "duration_ms": "7"}),
    ]
    processed, dead, emitted, samples, instances = {}, {}, {}, [], {}
    assert parse_entries(entries, 0.0, processed, dead, samples, emitted, instances) == 2
    assert processed == {"O1": 19, "O7": 3} and dead == {"O1": 1, "O7": 0}
    assert emitted == {"O1": 57, "O7": 0} and len(samples) == 1
    assert instances == {
        "c1": InstanceActivity("O1", processed=15, dead=1, emitted=45, busy_ms=1950),
        "c2": InstanceActivity("O1", processed=4, emitted=12, busy_ms=400),
        "c9": InstanceActivity("O7", processed=3),
    }


def test_an_operators_emissions_go_along_each_of_its_edges():
    got = edge_counts({"O1": 100, "O3": 90, "O7": 5}, OEE_OPERATORS)
    assert got[("O1", "O3")] == got[("O1", "O4")] == got[("O1", "O5")] == 100  # fan-out: a copy each
    assert got[("O3", "O7")] == 90 and got[("O7", "O9")] == 5
    assert got[("O2", "O8")] == 0  # no entry this interval
    assert len(got) == sum(len(d) for d in OEE_OPERATORS.values())


def test_utilisation_is_busy_time_over_the_slots_time():
    assert utilisation(1900, 2.0) == pytest.approx(0.95)
    assert utilisation(1900, 2.0, parallel=2) == pytest.approx(0.475)
    assert utilisation(10, 0.0) is None


def test_cpu_fields_add_up_and_stay_unknown_where_no_entry_has_them():
    entries = [
        count("c1", processed="2", dead="0", busy_ms="900", cpu_ms="400", run_delay_ms="120", container_cpu_ms="450"),
        count("c1", processed="1", dead="0", busy_ms="300", cpu_ms="100"),  # the cgroup counter unreadable once
        count("c2", processed="1", dead="0", busy_ms="50"),  # an older image: no CPU fields
        count("c3", processed="1", dead="0", cpu_ms="1.5"),  # malformed: skipped whole
    ]
    processed, dead, samples, instances = {}, {}, [], {}
    assert parse_entries(entries, 0.0, processed, dead, samples, {}, instances) == 1
    assert instances["c1"] == InstanceActivity("O1", processed=3, busy_ms=1200, cpu_ms=500, container_cpu_ms=450,
                                               run_delay_ms=120)
    assert instances["c2"].cpu_ms is None and instances["c2"].container_cpu_ms is None
    assert instances["c2"].run_delay_ms is None
