"""The operator runner (``python -m operators.runner``) against real RabbitMQ and Redis: round
trip, measurements, dead letters, SIGTERM and SIGKILL, broker restart, parallel workers, pool
activation, busy time and emissions per operator."""
from __future__ import annotations

import json
import signal
import time
from typing import Dict, List, Optional

import pika
import pika.exceptions
import pytest

from operators.api import (
    ACTIVE,
    INACTIVE,
    STOPPED,
    InstanceReport,
    activation_key,
    dead_hash,
    instance_state_hash,
    metrics_stream,
    processed_hash,
)
from operators.envelope import Envelope
from operators.transports import declare_wiring
from operators.wiring import delete, make_wiring
from testbed.live.metrics_reader import MetricsReader, edge_counts, utilisation

from .runner_helpers import RunnerProcess, drain, items, publish, queue_state, runner_env, wait_for
from .service_faults import BrokerOutage, rabbitmqctl

pytestmark = pytest.mark.integration

ONE_STAGE = {"sources": {"S": ["A"]}, "operators": {"A": ["sink"], "sink": []}}
TWO_STAGES = {"sources": {"S": ["A"]}, "operators": {"A": ["B"], "B": ["sink"], "sink": []}}


@pytest.fixture
def redis(redis_client):
    return redis_client  # the run's Redis keys are deleted after the test


@pytest.fixture
def channel(rabbitmq_url):
    conn = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    ch = conn.channel()
    ch.confirm_delivery()
    yield ch
    try:
        conn.close()
    except pika.exceptions.AMQPError:
        pass


@pytest.fixture
def run(rabbitmq_url, unique_prefix, tmp_path, redis):
    """Starts runners of this test's prefix; stops them, deletes the queues and the Redis keys after."""
    procs: List[RunnerProcess] = []
    wirings = []

    class Run:
        prefix = unique_prefix

        def wiring(self, topology):
            w = make_wiring(topology["sources"], topology["operators"], unique_prefix)
            declare_wiring(rabbitmq_url, w)
            wirings.append(w)
            return w

        def start(self, operator, topology, **env):
            p = RunnerProcess(runner_env(operator, unique_prefix, topology, AMQP_URL=rabbitmq_url, **env),
                              tmp_path / f"{operator}-{len(procs)}.log")
            procs.append(p)
            return p

    yield Run()
    for p in procs:
        p.stop()
    conn = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    for w in wirings:
        delete(conn.channel(), w)
    conn.close()


def consuming(channel, queue: str, n: int = 1):
    return lambda: queue_state(channel, queue)[1] >= n


def test_round_trip_publishes_acks_counts_and_samples(run, channel, redis):
    w = run.wiring(ONE_STAGE)
    inp, out = w.edge("S", "A").queue, w.edge("A", "sink").queue
    runner = run.start("A", ONE_STAGE, OPERATOR_IMPL="passthrough", SAMPLE_EVERY=10)
    wait_for("the runner to consume", consuming(channel, inp), proc=runner)
    sent = items(200)
    publish(channel, w.exchange("S"), sent)
    wait_for("200 outputs", lambda: queue_state(channel, out)[0] == 200, proc=runner)
    wait_for("the processed counter", lambda: redis.hget(processed_hash(run.prefix), "A") == b"200", proc=runner)

    runner.signal(signal.SIGTERM)
    assert runner.wait(20) == 0, runner.log()
    assert queue_state(channel, inp) == (0, 0)  # everything acknowledged, consumer gone
    outs = drain(channel, out)
    assert [e.item_id for e in outs] == [f"{e.item_id}/A" for e in sent]  # one consumer, one publisher: in order
    assert all(o.origin_ms == s.origin_ms and o.sent_ms >= s.sent_ms and o.payload == s.payload
               for o, s in zip(outs, sent, strict=True))

    entries = [f for _id, f in redis.xrange(metrics_stream(run.prefix))]
    samples = [f for f in entries if f[b"kind"] == b"sample"]
    counts = [f for f in entries if f[b"kind"] == b"count"]
    assert len(samples) == 20  # every 10th of 200
    assert all(f[b"operator"] == b"A" and f[b"instance"] == b"A-test" for f in entries)
    assert all(0 <= int(f[b"duration_ms"]) < 30_000 for f in samples)
    assert sum(int(f[b"processed"]) for f in counts) == 200
    assert sum(int(f[b"dead"]) for f in counts) == 0


def test_seconds_truncated_measurement_uses_the_amqp_timestamp(run, channel, redis):
    w = run.wiring(ONE_STAGE)
    runner = run.start("A", ONE_STAGE, OPERATOR_IMPL="passthrough", SAMPLE_EVERY=1, MEASUREMENT="seconds_truncated")
    wait_for("the runner to consume", consuming(channel, w.edge("S", "A").queue), proc=runner)
    sent = items(5)
    # sent 999 ms into the previous second: the truncated duration is 999 ms longer than the exact one
    sent = [Envelope(e.item_id, e.machine_id, e.type, e.origin_ms, (e.sent_ms // 1000 - 1) * 1000 + 999, e.payload)
            for e in sent]
    publish(channel, w.exchange("S"), sent)
    wait_for("5 samples", lambda: redis.xlen(metrics_stream(run.prefix)) >= 6, proc=runner)
    samples = [f for _id, f in redis.xrange(metrics_stream(run.prefix)) if f[b"kind"] == b"sample"]
    assert len(samples) == 5
    for f in samples:
        t_ms, d = int(f[b"t_ms"]), int(f[b"duration_ms"])
        assert d == t_ms - (sent[0].sent_ms // 1000) * 1000 == (t_ms - sent[0].sent_ms) + 999


def test_malformed_and_poison_inputs_are_dead_lettered_and_counted(run, channel, redis):
    topology = {"sources": {"S": ["O3"]}, "operators": {"O3": ["sink"], "sink": []}}
    w = run.wiring(topology)
    edge = w.edge("S", "O3")
    runner = run.start("O3", topology)  # the registry's O3: a payload without a production record is poison
    wait_for("the runner to consume", consuming(channel, edge.queue), proc=runner)
    now = int(time.time() * 1000)
    good = Envelope("m1/S2/0/0/O1", "machine-01", "production_record", now, now, {
        "record_id": "m1/S2/0/0", "machine_id": "machine-01", "machine_type": "cnc milling", "location": "hall 1",
        "produced_units": 45, "defective_units": 2, "planned_production_time_s": 60, "status": "available",
        "timestamp_ms": now})
    poison = Envelope("m1/S2/1/0/O1", "machine-01", "production_record", now, now, {"record_id": "x"})
    channel.basic_publish(w.exchange("S"), "", b"not json at all", pika.BasicProperties(delivery_mode=2))
    channel.basic_publish(w.exchange("S"), "", b'{"v": 99}', pika.BasicProperties(delivery_mode=2))
    publish(channel, w.exchange("S"), [poison, good])

    wait_for("3 dead letters", lambda: queue_state(channel, edge.dead_letter_queue)[0] == 3, proc=runner)
    wait_for("the good item", lambda: queue_state(channel, w.edge("O3", "sink").queue)[0] == 1, proc=runner)
    wait_for("the dead counter", lambda: redis.hget(dead_hash(run.prefix), "O3") == b"3", proc=runner)
    assert redis.hget(processed_hash(run.prefix), "O3") == b"1"
    bodies = []
    while True:
        method, _p, body = channel.basic_get(edge.dead_letter_queue, auto_ack=True)
        if method is None:
            break
        bodies.append(body)
    assert bodies[:2] == [b"not json at all", b'{"v": 99}'] and Envelope.decode(bodies[2]).item_id == poison.item_id
    [out] = drain(channel, w.edge("O3", "sink").queue)
    assert out.type == "performance" and out.payload["value"] == pytest.approx(0.9)
    assert runner.proc.poll() is None  # still running
    runner.signal(signal.SIGTERM)
    assert runner.wait(20) == 0


def test_sigterm_stops_consuming_finishes_what_it_holds_and_exits(run, channel, redis):
    w = run.wiring(ONE_STAGE)
    inp, out = w.edge("S", "A").queue, w.edge("A", "sink").queue
    runner = run.start("A", ONE_STAGE, OPERATOR_IMPL="passthrough", WORK_MS=50, PREFETCH=5)
    wait_for("the runner to consume", consuming(channel, inp), proc=runner)
    publish(channel, w.exchange("S"), items(100))  # 100 x 50 ms: 5 s of work
    wait_for("a few outputs", lambda: queue_state(channel, out)[0] >= 5, proc=runner)
    runner.signal(signal.SIGTERM)
    t0 = time.monotonic()
    assert runner.wait(20) == 0, runner.log()
    assert time.monotonic() - t0 < 3.0  # held only a prefetch's worth, not the whole backlog
    left, consumers = queue_state(channel, inp)
    outs = drain(channel, out)
    assert consumers == 0 and left > 0
    assert left + len(outs) == 100  # every input either processed (and acked) or back in the queue
    assert len({o.item_id for o in outs}) == len(outs)
    assert redis.hget(processed_hash(run.prefix), "A") == str(len(outs)).encode()  # the final flush
    assert "stopped" in runner.log()


def test_sigkill_mid_stream_loses_nothing_and_duplicates_nothing_downstream(run, channel, redis):
    """A killed instance's unacknowledged inputs are redelivered to its successor; the ones whose
    outputs were already confirmed are recognised (Redis) and not emitted again, and an output
    emitted twice in the kill's window is dropped by the next stage's duplicate check."""
    w = run.wiring(TWO_STAGES)
    inp, mid, out = w.edge("S", "A").queue, w.edge("A", "B").queue, w.edge("B", "sink").queue
    # 600 items at 20 ms on 2 threads: 6 s of work, so that the kill after a quarter of them still comes
    # mid-stream when the test's polling is seconds late on a loaded machine (at 3 ms the whole stream
    # had passed by the time of the kill)
    n = 600
    a = run.start("A", TWO_STAGES, OPERATOR_IMPL="passthrough", WORK_MS=20, PREFETCH=20, PARALLEL=2)
    b = run.start("B", TWO_STAGES, OPERATOR_IMPL="passthrough", PREFETCH=20)
    wait_for("A to consume", consuming(channel, inp), proc=a)
    wait_for("B to consume", consuming(channel, mid), proc=b)
    publish(channel, w.exchange("S"), items(n))
    wait_for("output under way", lambda: queue_state(channel, out)[0] >= n // 4, proc=a)
    a.signal(signal.SIGKILL)
    a.wait(10)
    assert queue_state(channel, out)[0] < n  # killed mid-stream
    a2 = run.start("A", TWO_STAGES, OPERATOR_IMPL="passthrough", PREFETCH=20, INSTANCE_ID="A-second")
    wait_for("every input through", lambda: queue_state(channel, inp)[0] == 0
             and queue_state(channel, out)[0] >= n, timeout_s=60, proc=a2)
    time.sleep(1.0)  # anything still to come (a duplicate) would arrive now
    for p in (a2, b):
        p.signal(signal.SIGTERM)
        assert p.wait(20) == 0, p.log()
    ids = [e.item_id for e in drain(channel, out)]
    assert sorted(ids) == sorted(f"{e.item_id}/A/B" for e in items(n))  # all there, none twice
    assert queue_state(channel, inp)[0] == queue_state(channel, mid)[0] == 0


@pytest.mark.slow
def test_runners_reconnect_after_a_broker_restart_and_lose_nothing(run, rabbitmq_url, redis):
    n = 400
    outage = BrokerOutage(rabbitmq_url).wait_armed()  # the CLI booted: the broker goes away mid-stream
    try:
        reconnect_after_an_outage(run, rabbitmq_url, outage, n)
    finally:
        outage.end()


def reconnect_after_an_outage(run, rabbitmq_url: str, outage: BrokerOutage, n: int) -> None:
    w = run.wiring(TWO_STAGES)
    inp, mid, out = w.edge("S", "A").queue, w.edge("A", "B").queue, w.edge("B", "sink").queue
    conn = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    ch = conn.channel()
    ch.confirm_delivery()
    a = run.start("A", TWO_STAGES, OPERATOR_IMPL="passthrough", WORK_MS=5, PREFETCH=10)
    b = run.start("B", TWO_STAGES, OPERATOR_IMPL="passthrough", PREFETCH=10)
    wait_for("A to consume", consuming(ch, inp), proc=a)
    wait_for("B to consume", consuming(ch, mid), proc=b)
    publish(ch, w.exchange("S"), items(n))
    wait_for("output under way", lambda: queue_state(ch, out)[0] >= 50, proc=a)
    conn.close()
    with outage:
        time.sleep(1.0)
    conn = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    ch = conn.channel()
    want = {f"{e.item_id}/A/B" for e in items(n)}
    got: List[str] = []

    def everything_out() -> bool:
        got.extend(e.item_id for e in drain(ch, out))
        return set(got) == want

    wait_for("every item at the output after the restart", everything_out, timeout_s=60, proc=a)
    for p in (a, b):
        p.signal(signal.SIGTERM)
        assert p.wait(20) == 0, p.log()
        assert "reconnecting" in p.log()
    assert queue_state(ch, inp)[0] == queue_state(ch, mid)[0] == 0
    assert set(got) == want  # nothing lost (at least once: a restart may duplicate an item)
    conn.close()


def test_parallel_workers_process_items_at_the_same_time(run, channel):
    w = run.wiring(ONE_STAGE)
    inp, out = w.edge("S", "A").queue, w.edge("A", "sink").queue
    publish(channel, w.exchange("S"), items(8))  # waiting before the runner starts: they come in one burst
    runner = run.start("A", ONE_STAGE, OPERATOR_IMPL="passthrough", WORK_MS=300, PREFETCH=8, PARALLEL=4)
    wait_for("the runner to consume", lambda: queue_state(channel, inp) == (0, 1), proc=runner)
    t0 = time.monotonic()
    wait_for("8 outputs", lambda: queue_state(channel, out)[0] == 8, proc=runner)
    assert time.monotonic() - t0 < 1.8  # 4 at a time: ~0.6 s; one at a time would take 2.4 s
    runner.signal(signal.SIGTERM)
    assert runner.wait(20) == 0


# ---- pool activation, busy time, emissions per operator ------------------------------------

def broker_channels(connection_name: str) -> List[tuple]:
    """(unacknowledged, consumers) of each channel of the named connection, from the broker's channel
    processes (the management API's figures lag by up to its statistics interval)."""
    def listing(*args: str) -> list:
        return json.loads(rabbitmqctl("--formatter", "json", *args))

    pids = {c["pid"] for c in listing("list_connections", "pid", "client_properties")
            if ["connection_name", "longstr", connection_name] in c["client_properties"]}
    assert len(pids) == 1, f"{len(pids)} connections named {connection_name!r}"
    return [(ch["messages_unacknowledged"], ch["consumer_count"])
            for ch in listing("list_channels", "connection", "messages_unacknowledged", "consumer_count")
            if ch["connection"] in pids]


def instance_state(redis, prefix: str, instance: str) -> Optional[str]:
    report = InstanceReport.decode(redis.hget(instance_state_hash(prefix), instance))
    return report.state if report else None


def work_budget_s(work_s: float) -> float:
    """A timeout for ``work_s`` seconds of work on a shared 2-core machine."""
    return 30.0 + 4.0 * work_s


class Activity:
    """Per-instance processed counts and emissions per operator, summed over metrics reads."""

    def __init__(self, redis, prefix: str):
        self.reader = MetricsReader(redis, prefix, run_start_s=0.0)
        self.processed: Dict[str, int] = {}
        self.emitted: Dict[str, int] = {}

    def read(self) -> "Activity":
        batch = self.reader.read()
        assert batch.malformed == 0
        for instance, activity in batch.instances.items():
            self.processed[instance] = self.processed.get(instance, 0) + activity.processed
        for operator, n in batch.emitted.items():
            self.emitted[operator] = self.emitted.get(operator, 0) + n
        return self


def test_a_pool_replica_switched_off_hands_back_what_it_holds_and_consumes_again_when_switched_on(
        run, channel, redis):
    w = run.wiring(ONE_STAGE)
    inp, out = w.edge("S", "A").queue, w.edge("A", "sink").queue
    names = ["A-0", "A-1", "A-2"]
    pool = {name: run.start("A", ONE_STAGE, OPERATOR_IMPL="passthrough", WORK_MS=20, PREFETCH=10,
                            ACTIVATION_POLL_S=0.1, INSTANCE_ID=name) for name in names}
    wait_for("three consumers", consuming(channel, inp, 3), proc=pool["A-0"])
    n, m = 600, 100
    publish(channel, w.exchange("S"), items(n))
    wait_for("output under way", lambda: queue_state(channel, out)[0] >= 100,
             timeout_s=work_budget_s(n * 0.02 / 3), proc=pool["A-0"])

    off = names[1:]
    for name in off:
        redis.set(activation_key(run.prefix, name), "0")
    for name in off:
        wait_for(f"{name} to report inactive", lambda name=name: instance_state(redis, run.prefix, name) == INACTIVE,
                 proc=pool[name])
    assert queue_state(channel, inp)[0] > 0  # mid-stream: the rest is for A-0
    for name in off:
        assert broker_channels(f"{name} source") == [(0, 0)]  # holds nothing, consumes nothing
    assert queue_state(channel, inp)[1] == 1
    time.sleep(1.0)  # their last count entries (flushed every 0.2 s) are in the stream
    at_switch_off = dict(Activity(redis, run.prefix).read().processed)

    wait_for("every input processed", lambda: queue_state(channel, out)[0] == n,
             timeout_s=work_budget_s(n * 0.02), proc=pool["A-0"])
    wait_for("the processed counter", lambda: redis.hget(processed_hash(run.prefix), "A") == str(n).encode())
    activity = Activity(redis, run.prefix).read()
    assert {name: activity.processed.get(name, 0) for name in off} == \
        {name: at_switch_off.get(name, 0) for name in off}  # nothing more since the switch-off
    ids = [e.item_id for e in drain(channel, out)]
    assert sorted(ids) == sorted(f"{e.item_id}/A" for e in items(n))  # nothing lost, nothing twice

    redis.set(activation_key(run.prefix, "A-1"), "1")
    wait_for("A-1 to report active", lambda: instance_state(redis, run.prefix, "A-1") == ACTIVE, proc=pool["A-1"])
    wait_for("two consumers", consuming(channel, inp, 2), proc=pool["A-1"])
    publish(channel, w.exchange("S"), items(m, start=n))
    wait_for("the new inputs processed", lambda: redis.hget(processed_hash(run.prefix), "A") == str(n + m).encode(),
             timeout_s=work_budget_s(m * 0.02), proc=pool["A-1"])
    for p in pool.values():
        p.signal(signal.SIGTERM)
        assert p.wait(20) == 0, p.log()
    activity.read()
    assert activity.processed["A-1"] > at_switch_off.get("A-1", 0)  # consumes again
    assert activity.processed["A-2"] == at_switch_off.get("A-2", 0)
    assert sum(activity.processed.values()) == n + m and activity.emitted == {"A": n + m}
    assert sorted(e.item_id for e in drain(channel, out)) == sorted(f"{e.item_id}/A" for e in items(m, start=n))
    assert queue_state(channel, inp) == (0, 0)
    assert all(instance_state(redis, run.prefix, name) == STOPPED for name in names)


@pytest.mark.parametrize("parallel", [1, 2])
def test_a_saturated_instance_is_busy_all_the_time(run, channel, redis, parallel):
    w = run.wiring(ONE_STAGE)
    out = w.edge("A", "sink").queue
    n, work_ms, flush_s = 40 * parallel, 100, 0.5
    publish(channel, w.exchange("S"), items(n))  # a backlog: the instance never waits for input
    runner = run.start("A", ONE_STAGE, OPERATOR_IMPL="passthrough", WORK_MS=work_ms, PREFETCH=5, PARALLEL=parallel,
                       METRICS_FLUSH_S=flush_s)
    # 4 s of work: read the count entries written while at least a prefetch's worth was still queued
    wait_for("half the backlog", lambda: queue_state(channel, out)[0] >= n // 2,
             timeout_s=work_budget_s(n * work_ms / 1000 / parallel), proc=runner)
    counts = [f for _id, f in redis.xrange(metrics_stream(run.prefix)) if f[b"kind"] == b"count"]
    assert len(counts) >= 4
    steady = counts[1:]  # the first interval includes the start-up
    busy_ms = sum(int(f[b"busy_ms"]) for f in steady[1:])
    interval_s = (int(steady[-1][b"t_ms"]) - int(steady[0][b"t_ms"])) / 1000
    share = utilisation(busy_ms, interval_s, parallel)
    assert share is not None and 0.9 <= share <= 1.05, (busy_ms, interval_s)
    runner.signal(signal.SIGTERM)
    assert runner.wait(30) == 0, runner.log()


FAN_OUT = {"sources": {"S": ["A"]}, "operators": {"A": ["B", "C"], "B": ["sink"], "C": [], "sink": []}}


def test_emissions_per_operator_give_the_count_of_each_edge(run, channel, redis):
    w = run.wiring(FAN_OUT)
    runners = [run.start(op, FAN_OUT, OPERATOR_IMPL="passthrough", INSTANCE_ID=f"{op}-test") for op in "ABC"]
    for edge, proc in zip((w.edge("S", "A"), w.edge("A", "B"), w.edge("A", "C")), runners, strict=True):
        wait_for(f"{edge.consumer} to consume", consuming(channel, edge.queue), proc=proc)
    n = 150
    publish(channel, w.exchange("S"), items(n))
    for op in "BC":
        wait_for(f"{op}'s processed counter",
                 lambda op=op: redis.hget(processed_hash(run.prefix), op) == str(n).encode(),
                 proc=runners[0])
    for p in runners:
        p.signal(signal.SIGTERM)
        assert p.wait(20) == 0, p.log()
    activity = Activity(redis, run.prefix).read()
    assert activity.emitted == {"A": n, "B": n, "C": n}
    assert edge_counts(activity.emitted, FAN_OUT["operators"]) == {("A", "B"): n, ("A", "C"): n, ("B", "sink"): n}
    assert queue_state(channel, w.edge("B", "sink").queue)[0] == n  # what the broker got along B -> sink
