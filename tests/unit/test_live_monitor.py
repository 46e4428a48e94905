"""The live monitor's parsing and aggregation, with hand-made inputs (nothing running)."""
from __future__ import annotations

import math

import pytest

from operators.wiring import wiring_for
from testbed.config import OperatorConfig, SourceConfig, TopologyConfig
from testbed.eventlog import EventLog
from testbed.live.kafka_lag import fold_lags, group_lag
from testbed.live.metrics_reader import Sample, parse_entries
from testbed.live.monitor import MonitorReading, record_reading
from testbed.live.rabbit_management import (
    ManagementClient,
    ManagementError,
    QueueStats,
    credentials_from_amqp_url,
    fold_depths,
    parse_queue_stats,
    redact,
)
from testbed.model import HostView, InstanceState, InstanceView
from testbed.monitoring import (
    DurationWindows,
    Observer,
    SnapshotSettings,
    counted,
    hosts_row,
    instance_counts,
    interval_means,
    new_monitor_tables,
)
from testbed.observation import InstanceObservation, Observation, OperatorObservation
from testbed.topology import Topology
from tests.conftest import compose_config

OPS = ("O1", "O2", "O3", "O4", "O5", "O6", "O7", "O9", "O8")


@pytest.fixture(scope="module")
def wiring():
    return wiring_for(compose_config().topology, "run1")


# ---- management API ------------------------------------------------------------------------

def test_queue_listing_pages_and_lists_parse_to_ready_plus_unacked():
    page = {"items": [
        {"name": "run1.O1.O3", "messages": 7, "messages_ready": 5, "messages_unacknowledged": 2,
         "message_stats": {"publish": 40}},
        {"name": "run1.O1.O4"},  # declared less than one statistics refresh ago: no counts yet
        {"name": "run1.O1.O5", "messages": 4},  # only the total: taken as ready
        {"name": "run1.O3.O7", "messages_ready": None, "messages_unacknowledged": 3},
        {"messages": 9},  # no name: skipped
    ], "page": 1, "page_count": 1}
    stats = parse_queue_stats(page)
    assert stats["run1.O1.O3"] == QueueStats("run1.O1.O3", 5, 2, 40) and stats["run1.O1.O3"].depth == 7
    assert stats["run1.O1.O4"].depth == 0 and stats["run1.O1.O4"].published == 0  # nothing published yet
    assert (stats["run1.O1.O5"].ready, stats["run1.O1.O5"].unacked) == (4, 0)
    assert stats["run1.O3.O7"].depth == 3
    assert len(stats) == 4
    assert parse_queue_stats(page["items"]) == stats
    with pytest.raises(ValueError):
        parse_queue_stats({"error": "x"})


def test_depths_sum_an_operators_input_edges_and_dead_letters_apart(wiring):
    stats = {q.name: q for q in (
        QueueStats("run1.O3.O7", 10, 1, 30), QueueStats("run1.O4.O7", 20, 0, 25), QueueStats("run1.O5.O7", 0, 5, 5),
        QueueStats("run1.O2.O8", 3, 0), QueueStats("run1.O6.O8", 4, 0), QueueStats("run1.O9.O8", 0, 0),
        QueueStats("run1.S2_production.O1", 100, 5), QueueStats("run1.O4.O7.dead", 2, 0),
        QueueStats("run1.O1.O3.dead", 1, 0),
    )}
    got = fold_depths(wiring, stats)
    assert got.depths["O7"] == 36 and got.depths["O8"] == 7 and got.depths["O1"] == 105
    assert got.depths["O2"] == 0 and set(got.depths) == set(OPS)
    assert got.dead_letters == {**{o: 0 for o in OPS}, "O7": 2, "O3": 1}
    assert got.inflow is None  # some queues' publish counts unknown (as from passive declares)
    assert "run1.O1.O3" in got.missing and "run1.O3.O7" not in got.missing
    assert len(got.missing) == 2 * len(wiring.edges) - len(stats)
    known = {n: QueueStats(n, q.ready, q.unacked, q.published or 0) for n, q in stats.items()}
    assert fold_depths(wiring, known).inflow == {**{o: 0 for o in OPS}, "O7": 60}


def test_credentials_and_vhost_come_from_the_amqp_url():
    assert credentials_from_amqp_url("amqp://guest:guest@127.0.0.1:5672/%2F") == ("guest", "guest", "/")
    assert credentials_from_amqp_url("amqp://u%40x:p%3Aw@h/prod") == ("u@x", "p:w", "prod")
    assert credentials_from_amqp_url("amqp://h") == ("guest", "guest", "/")
    assert redact("amqp://u:secret@h:5672/%2F") == "amqp://u:***@h:5672/%2F"
    assert redact("http://h:15672") == "http://h:15672"


def test_an_unreachable_management_api_is_named_in_the_error():
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = ManagementClient(f"http://127.0.0.1:{port}/", "amqp://guest:guest@127.0.0.1/%2F", timeout_s=2)
    with pytest.raises(ManagementError, match=rf"http://127\.0\.0\.1:{port}/api/queues/%2F.*unreachable"):
        client.queue_stats("run1")


# ---- Kafka lag -----------------------------------------------------------------------------

def test_kafka_lag_is_end_minus_committed_or_minus_log_start_without_commit(wiring):
    t1, t7 = "run1.O1", "run1.O7"
    end = {(t1, 0): 100, (t1, 1): 50, (t7, 0): 30}
    start = {(t1, 0): 0, (t1, 1): 10, (t7, 0): 0}
    committed = {
        "run1.O1.O3": {(t1, 0): 90, (t1, 1): 50},  # 10 + 0
        "run1.O1.O4": {(t1, 0): -1},  # no commit yet: from the log start, 100 + 40
        "run1.O7.O9": {(t7, 0): 30},
    }
    assert group_lag(t1, end, start, committed["run1.O1.O3"]) == 10
    got = fold_lags(wiring, end, start, committed)
    assert got.depths["O3"] == 10 and got.depths["O4"] == 140 and got.depths["O5"] == 140
    assert got.depths["O9"] == 0 and got.depths["O1"] == 0
    assert got.inflow["O3"] == got.inflow["O5"] == 140 and got.inflow["O9"] == 30 and got.inflow["O1"] == 0
    assert "run1.S2_production" in got.missing and t1 not in got.missing
    assert len(got.missing) == len(set(got.missing))


# ---- Redis metric entries ------------------------------------------------------------------

def test_metric_entries_become_run_relative_samples_and_counts_and_bad_ones_are_counted():
    start = 1_700_000_000.0
    entries = [
        (b"1-0", {b"operator": b"O3", b"instance": b"c1", b"kind": b"sample", b"t_ms": b"1700000012500",
                  b"duration_ms": b"42"}),
        ("1-1", {"operator": "O3", "instance": "c1", "kind": "count", "t_ms": "1700000013000",
                 "processed": "10", "dead": "1"}),
        ("1-2", {"operator": "O3", "instance": "c2", "kind": "count", "t_ms": "1700000013000",
                 "processed": "5", "dead": "0"}),
        ("1-3", {"operator": "O7", "instance": "c9", "kind": "sample", "t_ms": "1700000014000",
                 "duration_ms": "7.5", "latency_ms": "930"}),
        ("1-4", {"operator": "O7", "instance": "c9", "kind": "sample", "t_ms": "1", "duration_ms": "7",
                 "latency_ms": "soon"}),  # a latency that is not a number
        ("2-0", {"operator": "O3", "instance": "c1", "kind": "sample", "t_ms": "1700000012500"}),  # no duration
        ("2-1", {"operator": "O3", "instance": "c1", "kind": "gauge", "t_ms": "1"}),  # unknown kind
        ("2-2", {"operator": "O3", "instance": "c1", "kind": "count", "t_ms": "1", "processed": "-3", "dead": "0"}),
        ("2-3", {"operator": "O3", "instance": "c1", "kind": "sample", "t_ms": "x", "duration_ms": "1"}),
        ("2-4", {"operator": "O3", "instance": "c1", "kind": "sample", "t_ms": "1", "duration_ms": "nan"}),
        ("2-5", {"instance": "c1", "kind": "sample", "t_ms": "1", "duration_ms": "1"}),  # no operator
        ("2-6", {b"operator": b"\xff", b"instance": b"c1", b"kind": b"sample", b"t_ms": b"1", b"duration_ms": b"1"}),
        ("2-7", {"operator": "O3", "instance": "c1", "kind": "count", "t_ms": "1", "processed": "1.5", "dead": "0"}),
    ]
    processed, dead, samples = {}, {}, []
    bad = parse_entries(entries, start, processed, dead, samples)
    assert bad == 9
    assert samples == [Sample(12.5, "O3", "c1", 42.0), Sample(14.0, "O7", "c9", 7.5, 930.0)]
    assert processed == {"O3": 15} and dead == {"O3": 1}


# ---- interval means, windows, instance rows, snapshot --------------------------------------

def test_interval_means_per_operator_and_windows_keep_the_last_n():
    means = interval_means(("A", "B", "C"), ["A", "A", "B", "X"], [10.0, 30.0, 5.0, 999.0])
    assert means == {"A": 20.0, "B": 5.0, "C": None}
    w = DurationWindows(("A", "B", "C"), 3)
    for m in (means, {"A": 1.0}, {"A": 2.0, "C": 4.0}, {"A": 3.0, "B": None}):
        w.push(m)
    assert w.of("A") == (1.0, 2.0, 3.0)  # oldest dropped
    assert w.of("B") == (5.0,)  # an interval without samples adds nothing
    assert w.of("C") == (4.0,)
    w.push({"B": 6.0})
    assert w.of("B") == (5.0, 6.0)


def _views():
    inst = (
        InstanceView("a1", "O1", "h1", InstanceState.running, 0.0),
        InstanceView("a2", "O1", "h2", InstanceState.running, 5.0),
        InstanceView("a3", "O1", "h2", InstanceState.starting, 60.0),
        InstanceView("a4", "O1", "h1", InstanceState.draining, 0.0),
        InstanceView("b1", "O7", "h1", InstanceState.running, 0.0),
        InstanceView("z1", "OX", "h1", InstanceState.running, 0.0),  # not this topology's
    )
    host = HostView("h1", 4096, 7168, 3000, 6000, 0.0, 600.0, frozenset({"O1"}), True, 1.0)
    hosts = (host, HostView("h2", 4096, 7168, 4096, 7168, 50.0, 650.0, frozenset(), False, 1.0))
    return hosts, inst


def test_instance_rows_and_policy_counts_from_views():
    hosts, inst = _views()
    rows = instance_counts(("O1", "O7", "O2"), inst)
    assert (rows["O1"].running, rows["O1"].starting, rows["O1"].hosts) == (2, 1, 2)
    assert (rows["O7"].running, rows["O7"].starting, rows["O7"].hosts) == (1, 0, 1)
    assert (rows["O2"].running, rows["O2"].starting, rows["O2"].hosts) == (0, 0, 0)
    assert counted(("O1", "O7", "O2"), inst) == {"O1": 3, "O7": 1, "O2": 0}  # starting counts, draining not
    assert hosts_row(hosts) == (2, 1)


def test_snapshot_carries_depths_windows_counts_and_settings():
    hosts, inst = _views()
    topology = Topology.from_config(TopologyConfig(
        sources={"S": SourceConfig(downstream=["O1"])},
        operators={"O1": OperatorConfig(slo_ms=1000, downstream=["O7"]), "O7": OperatorConfig(slo_ms=1000)}))
    settings = SnapshotSettings(btu_s=600.0, reasoning_s=60.0, penalty=1e-4, max_hosts=8, host_cpu=4096,
                                host_memory=7168)
    observer = Observer(topology, settings, history=5, monitoring_s=15.0)
    for t, means, items in ((105.0, {"O1": 900.0, "O7": 10.0}, 400), (120.0, {"O1": 1200.0, "O7": None}, 500)):
        observer.observe(Observation(
            t=t, interval_s=15.0, input_items=items, edges={("S", "O1"): items, ("O1", "O7"): 7},
            operators={o: OperatorObservation(items if o == "O1" else 7, 5, 0, {}, means[o]) for o in ("O1", "O7")}))
    snap = observer.snapshot(120.0, hosts, inst, {"O1": 2}, depths={"O1": 300, "O7": 0})
    o1, o7 = snap.operators["O1"], snap.operators["O7"]
    assert list(snap.operators) == ["O1", "O7"]
    assert (o1.n, o1.queue, o1.durations, o1.duration, o1.scalings) == (3, 300, (900.0, 1200.0), 1200.0, 2)
    assert (o7.n, o7.queue, o7.durations, o7.scalings) == (1, 0, (10.0,), 0)
    assert (snap.t, snap.btu_s, snap.input_rate, snap.max_hosts, snap.hosts, snap.instances) == (
        120.0, 600.0, 500 / 15.0, 8, hosts, inst)
    assert snap.input_rates == (400 / 15.0, 500 / 15.0) and snap.edges == (("S", "O1"), ("O1", "O7"))
    assert snap.edge_items == {("S", "O1"): 500, ("O1", "O7"): 7} and o1.received == 500


def test_recorded_readings_fit_the_event_log_schema(tmp_path):
    hosts, inst = _views()
    ops = ("O1", "O7")
    tables = new_monitor_tables(samples=True)
    for t, depth in ((15.0, 7), (30.0, 0)):
        observation = Observation(
            t=t, interval_s=15.0, input_items=100, edges={("S", "O1"): 100, ("O1", "O7"): 3},
            operators={"O1": OperatorObservation(100, 100, depth, {"purge": 2}, 12.0),
                       "O7": OperatorObservation(3, 3, 1)},
            instances=(InstanceObservation("a1", "O1", 100, 0.5),))
        reading = MonitorReading(
            t=t, depths={"O1": depth, "O7": 1}, dead_letters={"O1": 0, "O7": 0}, missing_queues=(),
            samples=(Sample(t - 1.0, "O1", "a1", 12.0, 40.0), Sample(t - 0.5, "O7", "b1", 3.0, 800.0)),
            processed={"O1": 100, "O7": 3}, dead={"O1": 0, "O7": 0},
            means={"O1": 12.0, "O7": None}, malformed=0, depths_s=0.01, metrics_s=0.02, observation=observation,
        )
        record_reading(tables, reading, ops, hosts, inst, sinks=("O7",))
    assert tables["queues"] == {"t_s": [15.0, 15.0, 30.0, 30.0], "operator": ["O1", "O7"] * 2, "depth": [7, 1, 0, 1]}
    assert tables["instances"]["instances"] == [2, 1, 2, 1] and tables["instances"]["starting"] == [1, 0, 1, 0]
    assert tables["hosts"] == {"t_s": [15.0, 30.0], "leased": [2, 2], "ready": [1, 1]}
    assert tables["samples"]["t_s"] == [14.0, 14.5, 29.0, 29.5]
    assert tables["latency"] == {"t_s": [14.5, 29.5], "operator": ["O7", "O7"], "latency_ms": [800.0, 800.0]}
    log = EventLog(tmp_path)
    for name, cols in tables.items():
        log.write(name, cols)  # refuses columns that differ from the schema
    assert log.read("processed")["items"].tolist() == [100, 3, 100, 3]
    assert log.read("edges")["items"].tolist() == [100, 3, 100, 3]
    assert log.read("dropped")[["operator", "reason", "items"]].values.tolist() == [["O1", "purge", 2]] * 2
    assert log.read("instance_stats")["utilisation"].tolist() == [0.5, 0.5]
    assert math.isclose(log.read("samples")["duration_ms"].sum(), 30.0)


def test_samples_finished_while_draining_are_read_to_the_end_and_recorded(wiring):
    """After the last interval the instances drain: what they finish then is read in as many reads as
    the stream needs, and a sink's samples still reach the latency table."""
    from testbed.live.metrics_reader import MetricsBatch
    from testbed.live.monitor import LiveMonitor, record_samples

    class Reader:  # the stream holds 5 entries; each read returns at most max_entries of them
        max_entries = 2

        def __init__(self):
            self.left = [Sample(float(k), "O8" if k % 2 else "O3", f"i{k}", 1.0, 100.0 * k) for k in range(5)]

        def read(self):
            taken, self.left = self.left[:self.max_entries], self.left[self.max_entries:]
            return MetricsBatch(tuple(taken), {}, {}, len(taken), 0, "0-0")

    topology = Topology.from_config(compose_config().topology)
    monitor = LiveMonitor(topology, wiring, depth_source=None, metrics=Reader(),
                          settings=SnapshotSettings.from_config(compose_config(), 600.0), history=4)
    drained = monitor.read_remaining_samples()
    assert [s.t_s for s in drained] == [0.0, 1.0, 2.0, 3.0, 4.0]
    tables = new_monitor_tables(samples=True)
    record_samples(tables, drained, sinks=("O8",))
    assert tables["samples"]["t_s"] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert tables["latency"] == {"t_s": [1.0, 3.0], "operator": ["O8", "O8"], "latency_ms": [100.0, 300.0]}


def test_busy_and_cpu_time_reach_the_instance_cpu_table(wiring, tmp_path):
    """The instances' busy wall and CPU time go to `instance_cpu` beside `instance_stats`, for the same
    instances; the run's containers' CPU (unobserved ones too) comes with the reading."""
    from testbed.live.metrics_reader import InstanceActivity, MetricsBatch
    from testbed.live.monitor import LiveMonitor, new_cpu_table

    class Depths:
        def run_depths(self, _wiring):
            return type("D", (), {"depths": {o: 0 for o in OPS}, "dead_letters": {}, "missing": ()})()

    class Reader:
        def read(self):
            inst = {"o1-a": InstanceActivity("O1", processed=30, busy_ms=12000, cpu_ms=6000, container_cpu_ms=6500,
                                                     run_delay_ms=2500),
                    "o1-b": InstanceActivity("O1", busy_ms=0, cpu_ms=0, container_cpu_ms=40),  # switched off
                    "o3-a": InstanceActivity("O3", processed=30, busy_ms=90)}  # an older image: no CPU fields
            return MetricsBatch((), {"O1": 30, "O3": 30}, {}, 3, 0, "3-0", {}, inst)

    cfg = compose_config()
    monitor = LiveMonitor(Topology.from_config(cfg.topology), wiring, Depths(), Reader(),
                          SnapshotSettings.from_config(cfg, 600.0), history=4)
    reading = monitor.observe(15.0, {}, None, {"o1-b"})
    assert reading.container_cpu_ms == 6540
    tables = new_monitor_tables(samples=True)
    tables["instance_cpu"] = new_cpu_table()
    hosts, inst = _views()
    record_reading(tables, reading, OPS, hosts, inst)
    log = EventLog(tmp_path)
    log.write("instance_cpu", tables["instance_cpu"])
    cpu = log.read("instance_cpu")
    assert cpu.instance.tolist() == tables["instance_stats"]["instance"] == ["o1-a", "o3-a"]
    assert cpu.busy_ms.tolist() == [12000.0, 90.0] and cpu.cpu_ms.iloc[0] == 6000.0
    assert cpu.run_delay_ms.iloc[0] == 2500.0
    assert math.isnan(cpu.cpu_ms.iloc[1]) and math.isnan(cpu.container_cpu_ms.iloc[1])  # unknown, not 0
    assert math.isnan(cpu.run_delay_ms.iloc[1])
