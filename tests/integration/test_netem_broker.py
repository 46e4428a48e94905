"""The emulated network against a real RabbitMQ and Redis, without Docker (operators/netem.py,
testbed/live/netem.py): runner processes on emulated hosts fed by the provider's sender, with delays
drawn per hop and losses at the receiver, every item accounted for; and the items left in the queue
of an instance that went, handed on to the serving ones."""
from __future__ import annotations

import math
import signal
from typing import List

import pika
import pytest

from operators.api import processed_hash
from operators.envelope import amqp_properties
from operators.netem import NetView, unavailable_hash, view_key
from operators.transports import OutMessage, RabbitPublisher, declare_wiring
from operators.wiring import delete, instance_edges, make_wiring
from testbed.emulation import EmulationConfig, NetworkModel
from testbed.live.netem import LiveNetwork
from testbed.model import InstanceState, InstanceView

from .runner_helpers import RunnerProcess, items, queue_state, runner_env, wait_for

pytestmark = pytest.mark.integration

ONE_STAGE = {"sources": {"S": ["A"]}, "operators": {"A": ["sink"], "sink": []}}


@pytest.fixture
def network(rabbitmq_url, redis_client, unique_prefix):
    wiring = make_wiring(ONE_STAGE["sources"], ONE_STAGE["operators"], unique_prefix)
    declare_wiring(rabbitmq_url, wiring)
    emulation = EmulationConfig(enabled=True, availability={"vm2": 0.5})
    net = LiveNetwork(emulation, wiring, rabbitmq_url, redis_client, seed=3)
    yield net
    net.delete_queues()
    conn = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    delete(conn.channel(), wiring)
    conn.close()


def running(*members) -> List[InstanceView]:
    return [InstanceView(i, o, h, InstanceState.running, 0.0) for i, o, h in members]


def test_runners_on_emulated_hosts_delay_lose_and_account_for_every_item(network, rabbitmq_url, redis_client,
                                                                        tmp_path):
    prefix, wiring = network.wiring.prefix, network.wiring
    procs: List[RunnerProcess] = []
    try:
        for instance, operator, host in (("a1", "A", "vm2"), ("k1", "sink", "vm3")):
            network.register(instance, operator, host)
            procs.append(RunnerProcess(runner_env(operator, prefix, ONE_STAGE, AMQP_URL=rabbitmq_url,
                                                  INSTANCE_ID=instance, EMULATION_HOST=host, EMULATION_SEED=3,
                                                  OPERATOR_IMPL="passthrough"),
                                       tmp_path / f"{instance}.log"))
        network.sync(running(("a1", "A", "vm2"), ("k1", "sink", "vm3")))
        view = NetView.decode(redis_client.get(view_key(prefix)))
        assert view.members == {"A": (("a1", "vm2"),), "sink": (("k1", "vm3"),)} and view.hosts["vm2"] == 0.5
        sender = network.sender(RabbitPublisher(rabbitmq_url, wiring, ["S"], declare=False))
        sender.start(30.0)
        n = 400
        sender.publish_batch([OutMessage("S", e.item_id, e.machine_id, e.encode(), amqp_properties(e))
                              for e in items(n)])
        assert sender.flush(60.0)
        sender.close(10.0)

        def counts():
            processed = {k.decode(): int(v) for k, v in redis_client.hgetall(processed_hash(prefix)).items()}
            lost = {k.decode(): int(v) for k, v in redis_client.hgetall(unavailable_hash(prefix)).items()}
            return processed, lost

        # A on vm2 (A = 0.5) takes all n: about half lost there; the sink (vm3, A = 1) gets the rest
        def settled() -> bool:
            processed, lost = counts()
            return (processed.get("A", 0) + lost.get("A", 0) == n
                    and processed.get("sink", 0) + lost.get("sink", 0) == processed.get("A", 0))

        for proc in procs:
            wait_for("the runners to consume", lambda proc=proc: proc.proc.poll() is None and "consuming" in proc.log(),
                     timeout_s=60.0, proc=proc)
        wait_for("every item processed or lost", settled, timeout_s=120.0, proc=procs[1])
        processed, lost = counts()
        assert lost.get("sink", 0) == 0
        assert lost["A"] / n == pytest.approx(0.5, abs=4 * math.sqrt(0.25 / n))
        for proc in procs:  # a clean stop: the last second's counters are written too
            proc.signal(signal.SIGTERM)
            assert proc.wait(60.0) == 0
        conn = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
        try:
            channel = conn.channel()
            assert [queue_state(channel, e.queue)[0] for e in instance_edges(wiring, "A", "a1")
                    + instance_edges(wiring, "sink", "k1")] == [0, 0]
        finally:
            conn.close()
        # the delays drawn: provider (vm1) -> a1 (vm2) for each item, a1 -> k1 (vm2 -> vm3) for each it passed on
        model = NetworkModel(network.emulation)
        interval = network.read()
        (i12, d12), (i23, d23) = interval.hops[("vm1", "vm2")], interval.hops[("vm2", "vm3")]
        assert (i12, i23) == (n, processed["A"]) and interval.lost == {"A": lost["A"]}
        assert d12 / i12 == pytest.approx(model.mean_delay_ms("vm1", "vm2"),
                                          abs=5 * model.sd_delay_ms("vm1", "vm2") / math.sqrt(i12))
        assert d23 / i23 == pytest.approx(model.mean_delay_ms("vm2", "vm3"),
                                          abs=5 * model.sd_delay_ms("vm2", "vm3") / math.sqrt(i23))
    finally:
        for proc in procs:
            proc.stop()
        redis_client.delete(*redis_client.keys(f"{prefix}:*") or [f"{prefix}:none"])


def test_items_left_with_an_instance_that_went_go_to_the_serving_ones(network, rabbitmq_url, redis_client):
    prefix, wiring = network.wiring.prefix, network.wiring
    for instance, host in (("a1", "vm2"), ("a2", "vm3"), ("a3", "vm3")):
        network.register(instance, "A", host)
    network.sync(running(("a1", "A", "vm2"), ("a2", "A", "vm3"), ("a3", "A", "vm3")))
    conn = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    try:
        channel = conn.channel()
        channel.confirm_delivery()
        [a1] = instance_edges(wiring, "A", "a1")
        for e in items(5):
            channel.basic_publish("", a1.queue, e.encode(), pika.BasicProperties(**amqp_properties(e)))
        network.sync(running(("a2", "A", "vm3"), ("a3", "A", "vm3")))  # a1 went, 5 items in its queue
        assert network.rehomed == {"A": 5}
        depth = {i: queue_state(channel, instance_edges(wiring, "A", i)[0].queue)[0] for i in ("a1", "a2", "a3")}
        assert depth == {"a1": 0, "a2": 3, "a3": 2}  # in turn: a2, a3, a2, a3, a2
        assert NetView.decode(redis_client.get(view_key(prefix))).members == {"A": (("a2", "vm3"), ("a3", "vm3"))}
    finally:
        conn.close()
        redis_client.delete(*redis_client.keys(f"{prefix}:*") or [f"{prefix}:none"])
