"""Queue depth on the Kafka transport: consumer lag per consumer group (= edge, operators/wiring.py),
end offset − committed offset summed over the topic's partitions, summed per operator.

A group that has not committed on a partition yet starts from the log start (the runner consumes
with ``auto_offset_reset="earliest"``), so its lag there is end − earliest. Committed offsets move
when an instance commits after processing, so lag counts what is waiting plus what instances hold
uncommitted: the Kafka counterpart of RabbitMQ's ready + unacknowledged.

Against tansu (the test broker) lag is understated when producers batch: its ListOffsets(latest)
answers the last record batch's base offset + 1. Apache Kafka answers the log end offset.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from operators.wiring import Wiring
from testbed.live.rabbit_management import RunDepths

PartitionOffsets = Mapping[Tuple[str, int], int]  # (topic, partition) -> offset


class KafkaLagError(RuntimeError):
    """The broker could not be asked for offsets; names the bootstrap address."""


def _key(d: Mapping[str, Any], *names: str) -> Any:
    """The first of ``names`` in a metadata dict (kafka-python's keys follow the protocol version:
    ``name``/``partition_index`` now, ``topic``/``partition`` in older releases)."""
    for n in names:
        if n in d:
            return d[n]
    raise KafkaLagError(f"topic metadata without any of {names}: {sorted(d)}")


def group_lag(topic: str, end: PartitionOffsets, start: PartitionOffsets, committed: PartitionOffsets) -> int:
    lag = 0
    for (t, p), end_offset in end.items():
        if t != topic:
            continue
        position = committed.get((t, p))
        if position is None or position < 0:  # -1: no commit on this partition
            position = start.get((t, p), 0)
        lag += max(0, end_offset - position)
    return lag


def fold_lags(wiring: Wiring, end: PartitionOffsets, start: PartitionOffsets,
              committed: Mapping[str, PartitionOffsets]) -> RunDepths:
    """Lag per operator from end/start offsets of the run's topics and committed offsets per group;
    inflow = the records in the log of each input topic (end − start: all of them while retention
    has deleted nothing, which holds for a run's length)."""
    depths = {o: 0 for o in wiring.operators}
    inflow = {o: 0 for o in wiring.operators}
    missing = []
    topics = {t for t, _ in end}
    for e in wiring.edges:
        if e.topic not in topics:
            missing.append(e.topic)  # not created yet: nothing published, nothing waiting
            continue
        depths[e.consumer] += group_lag(e.topic, end, start, committed.get(e.consumer_group, {}))
        inflow[e.consumer] += sum(max(0, o - start.get(tp, 0)) for tp, o in end.items() if tp[0] == e.topic)
    return RunDepths(depths, {o: 0 for o in wiring.operators}, tuple(dict.fromkeys(missing)), inflow)


@dataclass
class KafkaLagReader:
    """Consumer lag of a run's edges through kafka-python's admin client (one client kept open)."""

    bootstrap: str
    timeout_ms: int = 5000
    _admin: Optional[Any] = None

    def _client(self) -> Any:
        if self._admin is None:
            from kafka import KafkaAdminClient
            from kafka.errors import KafkaError

            try:
                self._admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, client_id="testbed-monitor",
                                               request_timeout_ms=self.timeout_ms)
            except KafkaError as exc:
                raise KafkaLagError(f"Kafka at {self.bootstrap} unreachable: {exc!r}") from exc
        return self._admin

    def run_depths(self, wiring: Wiring) -> RunDepths:
        from kafka import TopicPartition
        from kafka.admin import OffsetSpec
        from kafka.errors import KafkaError

        admin = self._client()
        topics = sorted({e.topic for e in wiring.edges})
        try:
            existing = set(admin.list_topics())
            present = [t for t in topics if t in existing]
            partitions = [
                TopicPartition(_key(d, "name", "topic"), _key(p, "partition_index", "partition"))
                for d in (admin.describe_topics(present) if present else [])
                for p in d.get("partitions", [])
            ]
            end: Dict[Tuple[str, int], int] = {}
            start: Dict[Tuple[str, int], int] = {}
            if partitions:
                for spec, out in ((OffsetSpec.LATEST, end), (OffsetSpec.EARLIEST, start)):
                    for tp, info in admin.list_partition_offsets({tp: spec for tp in partitions}).items():
                        out[(tp.topic, tp.partition)] = int(getattr(info, "offset", info))
            groups = sorted({e.consumer_group for e in wiring.edges if e.topic in existing})
            committed: Dict[str, Dict[Tuple[str, int], int]] = {}
            for group in groups:  # one request each: brokers before OffsetFetch v8 take one group at a time
                offsets = admin.list_group_offsets({group: None}).get(group, {})
                committed[group] = {(tp.topic, tp.partition): int(om.offset) for tp, om in offsets.items()}
        except KafkaError as exc:
            raise KafkaLagError(f"Kafka at {self.bootstrap}: offsets of run {wiring.prefix!r}: {exc!r}") from exc
        return fold_lags(wiring, end, start, committed)

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None
