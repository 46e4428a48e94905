"""RabbitPublisher's confirm bookkeeping with a fake channel: acks (single and multiple) release
messages, nacks and a lost connection republish the unconfirmed ones in order."""
from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from data_provider.transports import OutMessage, RabbitPublisher, TransportError
from operators.wiring import make_wiring


class FakeChannel:
    is_open = True

    def __init__(self):
        self.published = []

    def basic_publish(self, exchange, routing_key, body, properties):
        self.published.append((exchange, body, properties.delivery_mode))


class FakeLoop:
    def call_later(self, _delay, fn):
        fn()

    def add_callback_threadsafe(self, fn):
        fn()


def frame(name, tag, multiple=False):
    return SimpleNamespace(method=SimpleNamespace(NAME=name, delivery_tag=tag, multiple=multiple))


def msg(i):
    return OutMessage("S1", f"item-{i}", "machine-01", f"body-{i}".encode(), {"delivery_mode": 2})


@pytest.fixture
def publisher():
    wiring = make_wiring({"S1": ["O2"]}, {"O2": []}, "p")
    confirmed = []
    pub = RabbitPublisher("amqp://x", wiring, declare=False, on_confirm=confirmed.extend)
    pub.CHUNK = 3  # several drain turns
    pub._conn = SimpleNamespace(ioloop=FakeLoop(), is_open=True)
    pub.confirmed_items = confirmed
    return pub


def bodies(channel):
    return [b.decode() for _, b, _ in channel.published]


def test_acks_release_messages_and_a_lost_connection_republishes_the_rest_in_order(publisher):
    ch = FakeChannel()
    publisher._on_confirm_mode(ch)
    publisher.publish_batch([msg(i) for i in range(8)])
    assert bodies(ch) == [f"body-{i}" for i in range(8)]
    assert {e for e, _, _ in ch.published} == {"p.S1"} and {d for _, _, d in ch.published} == {2}
    publisher._on_confirm(frame("Basic.Ack", 3, multiple=True))  # tags 1..3
    publisher._on_confirm(frame("Basic.Ack", 5))  # tag 5 alone
    assert [m.item_id for m in publisher.confirmed_items] == ["item-0", "item-1", "item-2", "item-4"]
    assert publisher.outstanding() == 4
    # the broker goes away: 3, 5, 6, 7 unconfirmed; two more items arrive while disconnected
    publisher._channel = None
    publisher._requeue_unconfirmed()
    publisher.publish_batch([msg(8), msg(9)])
    ch2 = FakeChannel()
    publisher._on_confirm_mode(ch2)  # reconnected: tags restart at 1
    assert bodies(ch2) == ["body-3", "body-5", "body-6", "body-7", "body-8", "body-9"]
    assert publisher.stats.republished == 4
    publisher._on_confirm(frame("Basic.Ack", 6, multiple=True))
    assert publisher.outstanding() == 0 and publisher.flush(0.1)
    assert sorted(m.item_id for m in publisher.confirmed_items) == sorted(f"item-{i}" for i in range(10))
    assert publisher.stats.confirmed == 10 and publisher.stats.published == 10


def test_nacked_messages_are_published_again(publisher):
    ch = FakeChannel()
    publisher._on_confirm_mode(ch)
    publisher.publish_batch([msg(0), msg(1)])
    publisher._on_confirm(frame("Basic.Nack", 2, multiple=True))
    assert bodies(ch) == ["body-0", "body-1", "body-0", "body-1"]
    assert publisher.stats.nacked == 2 and publisher.outstanding() == 2
    publisher._on_confirm(frame("Basic.Ack", 4, multiple=True))
    assert publisher.outstanding() == 0 and publisher.stats.confirmed == 2


def test_back_pressure_waits_for_confirms_beyond_max_unconfirmed(publisher):
    publisher.max_unconfirmed = 4
    ch = FakeChannel()
    publisher._on_confirm_mode(ch)
    publisher.publish_batch([msg(i) for i in range(4)])
    waiter = threading.Thread(target=publisher.publish_batch, args=([msg(4), msg(5)],))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and publisher.stats.published == 4  # blocked: 4 outstanding
    publisher._on_confirm(frame("Basic.Ack", 2, multiple=True))
    waiter.join(2)
    assert not waiter.is_alive() and publisher.stats.published == 6 and publisher.outstanding() == 4


def test_unknown_producer_is_refused(publisher):
    with pytest.raises(TransportError, match="O9"):
        publisher.publish_batch([OutMessage("O9", "x", "m", b"", {})])
