"""The Kafka source's pool activation without a broker (a fake consumer; a real consumer-group
join on tansu takes ~20 s): paused, it stops fetching; ``release`` commits what is settled (never
past a released input) and leaves the group; ``resume`` joins again and reads on from the commit."""
from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections import namedtuple
from typing import Dict, List

import pytest

from operators.sources import KafkaSource, Outcome
from operators.wiring import make_wiring
from tests.unit.runner_fakes import wait_until

# kafka-python reads its protocol schemas with deprecated importlib.resources calls
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

Record = namedtuple("Record", "offset value")
TP = ("p.S", 0)  # the partition (any hashable stands in for a TopicPartition)


class FakeConsumer:
    """One partition of ``log``; a subscription is assigned at the next poll, from the commit."""

    def __init__(self, log: List[bytes], committed: Dict, calls: List):
        self.log, self.committed, self.calls = log, committed, calls
        self.listener = None
        self.position = None  # None: not assigned
        self.rebalance = threading.Event()  # set: the next poll revokes the partition and assigns it back

    def seek(self, tp, offset):
        self.calls.append(("seek", offset))
        self.position = offset

    def subscribe(self, topics, listener):
        self.calls.append("subscribe")
        self.listener = listener

    def poll(self, timeout_ms, max_records):
        if self.listener is None:
            raise AssertionError("poll without a subscription")
        if self.position is None:
            self.position = self.committed.get(TP, 0)
            self._invoke("on_partitions_assigned")
        elif self.rebalance.is_set():  # as kafka-python does: a kept partition keeps its position
            self.rebalance.clear()
            self._invoke("on_partitions_revoked")
            self._invoke("on_partitions_assigned")
        records = [Record(o, self.log[o]) for o in range(self.position, min(len(self.log),
                                                                             self.position + max_records))]
        self.position += len(records)
        if not records:
            time.sleep(timeout_ms / 1000)
        return {TP: records} if records else {}

    def _invoke(self, method):
        """As kafka-python 3 does: an async listener's methods are awaited on the client's loop."""
        result = getattr(self.listener, method)([TP])
        if inspect.iscoroutine(result):
            asyncio.run(result)

    def commit(self, offsets):
        for tp, om in offsets.items():
            self.committed[tp] = om.offset
            self.calls.append(("commit", om.offset))

    async def _committed(self, offsets):
        self.commit(offsets)

    def commit_async(self, offsets):
        return self._committed(offsets)

    def unsubscribe(self):
        self.calls.append("unsubscribe")
        self.listener = None
        self.position = None

    def close(self):
        self.calls.append("close")


class FakeKafkaSource(KafkaSource):
    def __init__(self, log, **kwargs):
        wiring = make_wiring({"S": ["A"]}, {"A": []}, "p")
        super().__init__("nowhere:9092", wiring.inputs("A"), create=False, poll_ms=5, **kwargs)
        self.committed: Dict = {}
        self.calls: List = []
        self.log = log

    def _new_consumer(self, state):
        self.consumer = FakeConsumer(self.log, self.committed, self.calls)
        return self.consumer


@pytest.fixture
def source():
    src = FakeKafkaSource([f"r{i}".encode() for i in range(8)], prefetch=3, client_id="a-1")
    got = []
    lock = threading.Lock()

    def on_delivery(d):
        with lock:
            got.append(d)

    src.got = got
    src.start(on_delivery, timeout_s=5)
    yield src
    src.close()


def offsets(deliveries) -> List[int]:
    return [d.token[3] for d in deliveries]


def test_pause_release_and_resume_hand_the_partition_over_without_loss(source):
    wait_until(lambda: len(source.got) == 3)  # prefetch: 3 outstanding
    first = list(source.got)
    assert offsets(first) == [0, 1, 2]
    source.settle(first[0], Outcome.ACK)
    assert source.pause(timeout_s=5)
    source.settle(first[1], Outcome.ACK)  # was in process: finished
    source.settle(first[2], Outcome.RELEASE)  # not started: handed back
    time.sleep(0.05)
    assert len(source.got) == 3  # paused: nothing fetched although there is room again

    assert source.release(timeout_s=5)
    assert source.committed[TP] == 2  # up to the released input, not past it
    assert source.calls[-1] == "unsubscribe" and source.calls.count("subscribe") == 1
    assert not source.current(first[2])  # its token is stale: the partition is no longer ours

    source.resume()
    wait_until(lambda: len(source.got) == 6)
    assert offsets(source.got[3:]) == [2, 3, 4]  # read on from the commit: the released one first
    assert source.calls.count("subscribe") == 2 and all(source.current(d) for d in source.got[3:])


def test_started_paused_it_joins_no_group_until_resumed():
    src = FakeKafkaSource([b"r0"], prefetch=3, client_id="a-1")
    got = []
    src.pause()
    src.start(got.append, timeout_s=5)  # ready without a join
    try:
        time.sleep(0.05)
        assert got == [] and "subscribe" not in src.calls
        assert src.release(timeout_s=5) and "unsubscribe" not in src.calls  # nothing to leave
        src.resume()
        wait_until(lambda: len(got) == 1)
        assert src.calls[0] == "subscribe"
    finally:
        src.close()


def test_a_partition_revoked_and_assigned_back_is_read_again_from_its_first_unsettled_input(source):
    """A rebalance that gives the partition straight back leaves the client's position past what was
    held: those deliveries are stale, so the source must fetch them again or they are never processed."""
    wait_until(lambda: len(source.got) == 3)
    first = list(source.got)
    source.settle(first[0], Outcome.ACK)
    source.consumer.rebalance.set()
    source.settle(first[1], Outcome.RELEASE)  # room for the next poll, which rebalances
    wait_until(lambda: len(source.got) >= 5)
    assert not source.current(first[1]) and not source.current(first[2])  # held across the revocation
    assert ("seek", 1) in source.calls and source.committed[TP] == 1  # committed and read from the first unsettled
    again = source.got[3:5]
    assert offsets(again) == [1, 2] and all(source.current(d) for d in again)
