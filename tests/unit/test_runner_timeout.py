"""The runner's item timeout (ITEM_TIMEOUT_S), the PRESPS chain's operators A-D in the registry, and
the live run's environment and metrics for it. Without Redis (a port nothing listens on) a timed-out
input cannot be counted and is processed instead; the counting itself (Lua in Redis) is exercised
against a real Redis in tests/integration/test_live_presps.py."""
from __future__ import annotations

import time

import pytest
import redis as redis_lib
from redis.backoff import NoBackoff
from redis.retry import Retry

from operators.api import OperatorContext
from operators.envelope import Envelope
from operators.metrics import Metrics
from operators.passthrough import Passthrough
from operators.registry import make_operator
from operators.runner import Runner
from operators.runner_config import ConfigError, RunnerConfig, config_from_env
from operators.sources import Outcome
from testbed.live.metrics_reader import parse_entries
from tests.unit.runner_fakes import TOPOLOGY, FlagStore, HandPublisher, HandSource, Twice, wait_until


def unreachable():
    return redis_lib.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))


def runner_with_timeout(timeout_s: float, clock):
    cfg = RunnerConfig(operator="A", prefix="p", topology=TOPOLOGY, dedup_ttl_s=0, metrics_flush_s=3600,
                       drain_timeout_s=5, sample_every=1, activation_poll_s=0, item_timeout_s=timeout_s)
    source = HandSource(cfg.wiring().inputs("A"))
    publisher = HandPublisher()
    r = unreachable()
    runner = Runner(cfg, Twice(OperatorContext("A", "a-1", "p", r)), source, publisher, r, clock=clock,
                    sleep=lambda _s: None, activation=FlagStore())
    runner.start()
    return runner, source, publisher


def body(i: int, origin_ms: int) -> bytes:
    return Envelope(f"m/S/{i}", "m", "reading", origin_ms, origin_ms + 5, {}).encode()


def test_item_timeout_is_read_from_the_environment_and_checked():
    env = {"OPERATOR": "A", "RUN_PREFIX": "p", "TOPOLOGY": '{"sources": {"S": ["A"]}, "operators": {"A": []}}'}
    assert config_from_env(env).item_timeout_s == 0.0  # default: no timeout
    assert config_from_env({**env, "ITEM_TIMEOUT_S": "30"}).item_timeout_s == 30.0
    with pytest.raises(ConfigError, match="ITEM_TIMEOUT_S"):
        config_from_env({**env, "ITEM_TIMEOUT_S": "-1"})
    with pytest.raises(ConfigError, match="ITEM_TIMEOUT_S"):
        config_from_env({**env, "ITEM_TIMEOUT_S": "soon"})


def test_an_expired_input_that_cannot_be_counted_is_processed_not_lost():
    now_s = 1_000_000.0
    runner, source, publisher = runner_with_timeout(30.0, clock=lambda: now_s)
    source.push(body(1, origin_ms=int(now_s * 1000) - 31_000), token=1)  # 31 s old: expired
    wait_until(lambda: len(publisher.published) == 2)
    publisher.confirm(2)
    wait_until(lambda: source.settled == [(1, Outcome.ACK)])
    assert runner.stats.timed_out == 0 and runner.stats.processed == 1
    assert runner.metrics.totals.timed_out == 0
    runner.drain()


def test_expiry_is_the_age_of_the_origin_against_the_timeout():
    now_s = 1_000_000.0
    runner, _source, _publisher = runner_with_timeout(30.0, clock=lambda: now_s)
    now_ms = int(now_s * 1000)
    # 30 s exactly is not older than the timeout; 30.001 s is
    assert not runner._expired(Envelope("a", "m", "t", now_ms - 30_000, now_ms, {}))
    assert runner._expired(Envelope("a", "m", "t", now_ms - 30_001, now_ms, {}))
    assert not runner._expired(Envelope("a", "m", "t", now_ms - 1_000, now_ms, {}))
    runner.drain()


def test_without_a_timeout_an_old_input_is_processed():
    runner, source, publisher = runner_with_timeout(0.0, clock=time.time)
    source.push(body(1, origin_ms=1000), token=1)  # from 1970
    wait_until(lambda: len(publisher.published) == 2)
    publisher.confirm(2)
    wait_until(lambda: source.settled == [(1, Outcome.ACK)])
    assert runner.stats.processed == 1 and runner.stats.timed_out == 0
    runner.drain()


class Pipe:
    def __init__(self):
        self.calls = []

    def xadd(self, stream, fields):
        self.calls.append(("xadd", stream, dict(fields)))

    def hincrby(self, *args):
        self.calls.append(("hincrby",) + args)

    def execute(self):
        return []


class Recorder:
    def __init__(self):
        self.pipe = Pipe()

    def pipeline(self, transaction=False):
        return self.pipe


def test_timed_out_inputs_go_into_the_count_entry_and_are_read_back_per_operator():
    m = Metrics("p", "B", "b-1", clock=lambda: 10.0)
    m.timed_out(3)
    m.processed(2, 2)
    rec = Recorder()
    assert m.flush(rec)
    [(_, stream, count)] = [c for c in rec.pipe.calls if c[0] == "xadd"]
    assert stream == "p:metrics" and count["timeout"] == 3 and count["processed"] == 2
    m.processed(1, 1)  # nothing timed out: the entry has no timeout field (as older writers')
    rec2 = Recorder()
    m.flush(rec2)
    [(_, _, count2)] = [c for c in rec2.pipe.calls if c[0] == "xadd"]
    assert "timeout" not in count2
    processed, dead, samples, emitted, instances, timed_out = {}, {}, [], {}, {}, {}
    entries = [("1-0", {k: str(v) for k, v in count.items()}), ("2-0", {k: str(v) for k, v in count2.items()})]
    assert parse_entries(entries, 0.0, processed, dead, samples, emitted, instances, timed_out) == 0
    assert timed_out == {"B": 3} and processed == {"B": 3} and instances["b-1"].timeout == 3


def test_the_presps_chain_operators_are_pass_through():
    r = unreachable()
    for name in "ABCD":
        op = make_operator(name, OperatorContext(name, f"{name}-1", "p", r))
        assert isinstance(op, Passthrough)
        [out] = op.process(Envelope("m/S/7", "m", "reading", 1000, 2000, {"v": 1}))
        assert out.item_id == f"m/S/7/{name}" and out.payload == {"v": 1}


def test_the_live_environment_sets_the_item_timeout_only_where_the_topology_has_one():
    from operators.wiring import wiring_for
    from testbed.live.run import operator_environment
    from tests.integration.test_live_run import config

    chain = config("evaluation=presps", "backend=docker", "+backend.live.work_ms={A: 100, B: 200}")
    env = operator_environment(chain, wiring_for(chain.topology, "p"), "B", 10)
    assert env["ITEM_TIMEOUT_S"] == "30.0" and float(env["WORK_MS"]) == 200.0
    oee = config("backend=docker")
    assert "ITEM_TIMEOUT_S" not in operator_environment(oee, wiring_for(oee.topology, "p"), "O3", 10)


class _Depths:
    def __init__(self, depths):
        self.depths, self.dead_letters, self.missing = depths, {o: 0 for o in depths}, ()


class _DepthSource:
    def run_depths(self, wiring):
        return _Depths({"A": 0, "B": 6, "C": 0, "D": 0})


class _Metrics:
    """One read's worth of per-instance counts: B's one active replica busy 4.8 s of 5 s with 24
    items; its three switched-off pool members write empty counts (as the runner does)."""

    def read(self):
        from testbed.live.metrics_reader import InstanceActivity, MetricsBatch

        inst = {"b-1": InstanceActivity("B", processed=24, emitted=24, busy_ms=4800)}
        inst.update({f"b-{k}": InstanceActivity("B") for k in (2, 3, 4)})
        return MetricsBatch((), {"B": 24}, {}, 4, 0, "4-0", {"B": 24}, inst)


def test_switched_off_pool_members_do_not_dilute_the_live_utilisation():
    from operators.wiring import wiring_for
    from testbed.live.monitor import LiveMonitor
    from testbed.monitoring import SnapshotSettings
    from testbed.topology import Topology
    from tests.integration.test_live_run import config

    cfg = config("evaluation=presps_live")
    topo = Topology.from_config(cfg.topology)

    def monitor():
        return LiveMonitor(topo, wiring_for(cfg.topology, "p"), _DepthSource(), _Metrics(),
                           SnapshotSettings.from_config(cfg, 3600.0), 10, 5.0)

    # all four observed: mean utilisation (0.96 + 0 + 0 + 0) / 4 = 0.24, so a policy's
    # et = 0.24 x 5 s x 1 active / 24 items = 50 ms for B's 200 ms of work
    diluted = monitor().observe(5.0, {"S": 24}).observation.utilisation()["B"]
    assert diluted == pytest.approx(0.24)
    # the three switched off left out: 0.96, et = 0.96 x 5 x 1 / 24 = 200 ms
    reading = monitor().observe(5.0, {"S": 24}, None, {"b-2", "b-3", "b-4"})
    assert reading.observation.utilisation()["B"] == pytest.approx(0.96)
    assert [i.instance for i in reading.observation.instances] == ["b-1"]
    # one that processed something in the interval stays observed although switched off at its end
    assert len(monitor().observe(5.0, {"S": 24}, None, {"b-1"}).observation.instances) == 4
