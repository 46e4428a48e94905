"""The live job mode's pure parts (docs/papers/daedalus.md#live-runtime), on hand-computed values:
rebinding for a rescale, key shares and capacity from a probe, the in-flight bound, CPU from cgroup
readings, the time compression of the config and of the workload, the settings' validation, the
item encoding and which of the run's containers exited. The live runs themselves: tests/integration/test_live_job.py."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from operators.keyed_job import Item, ItemError
from operators.keyed_worker import WorkerConfig
from testbed.config import ConfigError
from testbed.experiment import config_for, plan_runs
from testbed.job_config import LiveJobConfig
from testbed.live.job_compression import compress_rates, scaled
from testbed.live.job_cpu import cpu_fraction, find_usage_path, parse_usage_ns
from testbed.live.job_routing import (
    InflightGate,
    Outage,
    capacity,
    committed_id,
    inflight_limit,
    last_log_line,
    parse_ids,
    rebinding,
    redis_loss,
    retry_until,
    worker_shares,
)
from testbed.messages import one_line
from tests.conftest import compose_config

LIVE_JOB = ("evaluation=daedalus", "backend=docker", "job.max_scaleout=15", "reps=1")


def test_rebinding_binds_the_new_workers_and_unbinds_the_removed():
    assert rebinding(0, 3) == ([0, 1, 2], [])
    assert rebinding(3, 5) == ([3, 4], [])
    assert rebinding(5, 2) == ([], [2, 3, 4])
    assert rebinding(4, 4) == ([], [])
    with pytest.raises(ValueError):
        rebinding(-1, 2)


def test_shares_and_capacity_from_a_probe():
    owner = {"k0": 0, "k1": 1, "k2": 1, "k3": 2}
    weights = {"k0": 1.0, "k1": 1.0, "k2": 2.0, "k3": 4.0}  # total 8
    assert worker_shares(owner, weights, 3) == [1 / 8, 3 / 8, 4 / 8]
    assert capacity(150.0, [1 / 8, 3 / 8, 4 / 8]) == 300.0  # the hottest worker (1/2) at 150 items/s
    assert worker_shares({"k0": 0}, {"k0": 1.0}, 2) == [1.0, 0.0]
    with pytest.raises(ValueError):
        worker_shares({"k0": 3}, {"k0": 1.0}, 2)


def test_inflight_gate_counts_forwarded_minus_processed_since_the_restart():
    gate = InflightGate(limit=100)
    gate.forwarded = 30
    assert gate.in_flight(10) == 20 and gate.room(10) == 80
    gate.restart(queued=50, processed_total=40)  # 50 items moved into the queues by the rescale
    assert gate.in_flight(40) == 50
    gate.forwarded += 10
    assert gate.in_flight(45) == 55 and gate.room(45) == 45
    gate.forwarded += 60
    assert gate.room(45) == 0  # 115 in flight: the router waits
    gate.restart(queued=0, processed_total=45, limit=300)  # a rescale to more workers raises the bound
    assert gate.limit == 300 and gate.room(45) == 300
    # 0.5 s of 12 workers at 74 items/s: 444 items; one worker at 150: 75
    assert inflight_limit(0.5, 74.0,
                          12) == 444 and inflight_limit(0.5, 150.0, 1) == 75 and inflight_limit(0.001, 1, 1) == 1


def test_cpu_fraction_of_the_quota():
    # 50 ms of CPU in 0.5 s with a quota of 0.1 core: all of the quota
    assert cpu_fraction(1_000_000_000, 1_050_000_000, 0.5, 0.1) == pytest.approx(1.0)
    assert cpu_fraction(0, 20_000_000, 1.0, 0.1) == pytest.approx(0.2)
    assert cpu_fraction(5, 5, 1.0, 0.1) == 0.0
    with pytest.raises(ValueError):
        cpu_fraction(0, 1, 0.0, 0.1)


def test_cgroup_usage_files_v1_and_v2(tmp_path: Path):
    assert parse_usage_ns(Path("a/cpuacct.usage"), "123456789\n") == 123_456_789
    assert parse_usage_ns(Path("a/cpu.stat"), "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n") == 2_500_000
    with pytest.raises(ValueError):
        parse_usage_ns(Path("a/cpu.stat"), "user_usec 2000\n")
    assert find_usage_path("abc", tmp_path) is None
    v2 = tmp_path / "system.slice" / "docker-abc.scope" / "cpu.stat"
    v2.parent.mkdir(parents=True)
    v2.write_text("usage_usec 7\n")
    assert find_usage_path("abc", tmp_path) == v2
    v1 = tmp_path / "cpuacct" / "docker" / "abc" / "cpuacct.usage"
    v1.parent.mkdir(parents=True)
    v1.write_text("9\n")
    assert find_usage_path("abc", tmp_path) == v1  # cgroup v1 first


def test_compress_rates_averages_f_seconds():
    assert compress_rates(np.array([6.0] * 6 + [12.0] * 6), 6).tolist() == [6.0, 12.0]
    # f = 1.5 over [3, 6, 9]: [0, 1.5) holds 3 + 0.5 x 6 = 6 items, [1.5, 3) holds 0.5 x 6 + 9 = 12
    assert compress_rates(np.array([3.0, 6.0, 9.0]), 1.5).tolist() == [4.0, 8.0]
    assert compress_rates(np.array([1.0, 2.0]), 1).tolist() == [1.0, 2.0]


def test_scaled_keeps_ints_and_zero():
    assert scaled(900, 6) == 150 and scaled(15, 6) == 2 and scaled(1, 6) == 1 and scaled(0, 6) == 0
    assert scaled(15.0, 6) == 2.5 and scaled(True, 6) is True


def test_the_paper_times_compressed_by_6_for_a_live_job_run():
    cfg = compose_config(*LIVE_JOB)
    runs = {s.config: s for s in plan_runs(cfg)}
    assert "daedalus-live" in runs and "static-12-live" in runs
    d = config_for(cfg, runs["daedalus-live"])
    p = d.policies["daedalus"]
    assert (p.loop_s, p.horizon_s, p.grace_s, p.keep_s, p.rt_target_s, p.warmup_s) == (10, 150, 30, 100, 100, 20)
    assert (p.downtime_out_s, p.downtime_in_s) == (5, 2)  # ints: 30/6, 15/6 = 2.5 rounded (to even)
    assert (p.fast_history_s, p.fallback_horizon_s, p.K) == (300, 150, 0)
    assert d.duration_min == 60.0 and d.job.checkpoint_s == 5.0 and d.job.window_s == 11
    assert d.job.downtime_out_s == pytest.approx([20 / 6,
                                                  40 / 6]) and d.job.downtime_in_s == pytest.approx([10 / 6, 20 / 6])
    h = config_for(cfg, runs["hpa-80-live"]).policies["hpa"]
    assert (h.sync_s, h.metric_window_s, h.up_window_s, h.down_window_s, h.policy_period_s) == (2.5, 2.5, 50, 50, 2.5)
    # the simulator's runs keep the paper's times
    sim = compose_config("evaluation=daedalus", "reps=1")
    s = config_for(sim, plan_runs(sim)[0])
    assert s.policies["daedalus"].loop_s == 60 and s.duration_min == 360
    # no compression: the times as configured
    one = compose_config(*LIVE_JOB, "backend.live.job.time_compression=1")
    assert config_for(one, plan_runs(one)[0]).policies["daedalus"].loop_s == 60


@pytest.mark.slow
def test_live_job_settings_are_validated_naming_the_key():
    with pytest.raises(ConfigError, match=r"backend\.live\.job\.cpus: .*1\.6 exceeds"):
        compose_config("evaluation=daedalus", "backend=docker", "job.max_scaleout=16")
    assert compose_config("evaluation=daedalus", "backend=docker", "job.max_scaleout=18",
                          "backend.live.job.cpus=0.08").backend.live.job.cpus == 0.08
    with pytest.raises(ConfigError, match=r"backend\.live\.transport"):
        compose_config(*LIVE_JOB, "backend.live.transport=kafka")
    with pytest.raises(ConfigError, match=r"backend\.live\.job\.time_compression"):
        compose_config(*LIVE_JOB, "backend.live.job.time_compression=0.5")
    with pytest.raises(ConfigError, match=r"backend\.live\.job\.inflight_s"):
        compose_config(*LIVE_JOB, "backend.live.job.inflight_s=0")


def test_item_encoding_and_worker_settings():
    item = Item(42, "k7", 1_700_000_000_123)
    assert item.encode() == b"42,k7,1700000000123" and Item.decode(item.encode()) == item
    for bad in (b"garbage", b"1,k,x", b"\xff,k,1"):
        with pytest.raises(ItemError):
            Item.decode(bad)
    cfg = WorkerConfig.from_env({"RUN_PREFIX": "r", "WORKER": "3", "BURN_MS": "0.6", "CHECKPOINT_S": "5"})
    assert (cfg.worker, cfg.burn_ms, cfg.checkpoint_s, cfg.prefetch) == (3, 0.6, 5.0, 2000)
    with pytest.raises(SystemExit, match="WORKER"):
        WorkerConfig.from_env({"RUN_PREFIX": "r"})
    with pytest.raises(SystemExit, match="CHECKPOINT_S"):
        WorkerConfig.from_env({"RUN_PREFIX": "r", "WORKER": "0", "CHECKPOINT_S": "0"})


def test_fault_reasons_are_one_line():
    assert one_line("a\n  b\tc\n") == "a b c"
    assert one_line("x" * 300, limit=10) == "x" * 9 + "…"
    logs = "INFO start\nTraceback (most recent call last):\n  File x\nConnectionError: gone\n\n"
    assert last_log_line(logs) == "ConnectionError: gone" and last_log_line("") == ""


def test_redis_loss_names_a_restart_and_missing_keys():
    assert redis_loss(12.4, "a", "a", True) is None
    lost = redis_loss(12.4, "a", "b", False)
    assert lost.startswith("Redis lost the run's state at t=12 s: it restarted") and "\n" not in lost
    assert "persistence" in redis_loss(3.0, "a", "b", True)  # restarted with the keys: the last writes may be gone
    assert "keys are gone" in redis_loss(7.0, "a", "a", False)  # flushed under a running Redis


def test_outage_is_timed_from_its_first_failure():
    o = Outage(10.0)
    assert not o.failed(5.0) and o.since == 5.0
    assert not o.failed(15.0) and o.failed(15.1)
    o.ok()
    assert o.since is None and not o.exceeded(100.0) and not o.failed(100.0)


def test_retry_until_a_deadline_on_a_fake_clock():
    clock = {"t": 0.0}
    calls = []

    def sleep(s):
        clock["t"] += s

    def flaky():
        calls.append(clock["t"])
        if len(calls) < 3:
            raise ConnectionError("down")
        return "up"

    assert retry_until(flaky, 5.0, lambda: clock["t"], sleep, (ConnectionError,), 1.0) == "up"
    assert calls == [0.0, 1.0, 2.0]
    calls.clear()
    clock["t"] = 0.0

    def down():
        calls.append(clock["t"])
        raise ConnectionError("down")

    with pytest.raises(ConnectionError):
        retry_until(down, 2.5, lambda: clock["t"], sleep, (ConnectionError,), 1.0)
    assert calls == [0.0, 1.0, 2.0]  # the next attempt would be past the deadline
    with pytest.raises(ValueError):  # other errors are not retried
        retry_until(lambda: int("x"), 5.0, lambda: clock["t"], sleep, (ConnectionError,), 1.0)


def test_max_recoveries_is_validated():
    assert LiveJobConfig().max_recoveries == 3 and LiveJobConfig(max_recoveries=0).validate(6) is None
    assert LiveJobConfig(max_recoveries=-1).validate(6)[0] == "backend.live.job.max_recoveries"


def test_the_ids_of_a_last_checkpoint():
    assert parse_ids(b"3,17,42") == {3, 17, 42} and parse_ids(None) == frozenset() and parse_ids(b"") == frozenset()
    assert committed_id(Item(42, "k7", 1).encode()) == 42 and committed_id(b"garbage") == -1


class FakePipe:
    def __init__(self, log):
        self.log = log

    def __getattr__(self, name):
        return lambda *a, **k: self.log.append((name, *a))

    def execute(self):
        self.log.append(("execute",))


class FakeRedis:
    def __init__(self):
        self.log = []

    def pipeline(self, transaction=True):
        return FakePipe(self.log)

    def hincrby(self, *a):
        self.log.append(("hincrby", *a))


class FakeChannel:
    def __init__(self):
        self.acks = []

    def basic_ack(self, tag, multiple=False):
        self.acks.append((tag, multiple))


def test_a_checkpoint_records_the_ids_it_commits_in_its_transaction():
    from operators.keyed_worker import KeyedWorker

    r = FakeRedis()
    w = KeyedWorker(WorkerConfig(prefix="p", worker=1, burn_ms=0.0, latency_every=1000), r, None)
    w.channel = FakeChannel()
    for tag, item in enumerate([Item(5, "k1", 0), Item(9, "k2", 0), Item(11, "k1", 0)], start=1):
        w.handle(tag, item.encode())
    w.commit()
    names = [e[0] for e in r.log]
    assert names.index("hset") < names.index("execute")  # in the checkpoint's transaction
    assert ("hset", "p:job:lastcommit", "w1", "5,9,11") in r.log
    assert w.channel.acks == [(3, True)] and w.pending_ids == []  # acknowledged after the commit


class FakeContainer:
    def __init__(self, cid, name, exit_code=0, logs=b""):
        self.id, self.name, self._logs = cid, name, logs
        self.attrs = {"State": {"ExitCode": exit_code}}

    def logs(self, tail=5):
        return self._logs


class FakeContainers:
    def __init__(self, exited):
        self.exited, self.filters = exited, None

    def list(self, all=False, filters=None):
        self.filters = filters
        return self.exited


def workers_with(current, exited):
    """The run's worker containers (testbed/live/job_workers.py) over an engine that lists `exited`."""
    from types import SimpleNamespace

    from testbed.live.job_workers import WorkerContainer, Workers

    workers = Workers(SimpleNamespace(containers=FakeContainers(exited)), "p", LiveJobConfig(), lambda w: {}, None)
    workers.current = {w: WorkerContainer(w, c, None, 0.0) for w, c in current.items()}
    return workers


def test_only_the_runs_current_workers_count_as_exited():
    w0, w2 = FakeContainer("a", "p-w-0-0"), FakeContainer("c", "p-w-2-2", 137)
    gone = FakeContainer("x", "p-w-1-1", 137)  # removed by a rescale: not a current worker
    workers = workers_with({0: w0, 2: w2}, [gone, w2])
    assert [(w, code) for w, _wc, code in workers.exited()] == [(2, 137)]
    assert workers.docker.containers.filters == {"label": "testbed.run=p", "status": ["exited", "dead"]}


def test_a_workers_exit_is_said_with_its_code_and_its_last_log_line():
    from testbed.live.job_workers import exit_message

    log = b"INFO x\nTraceback (most recent call last):\n  File y\nValueError: boom\n"
    crashed = FakeContainer("b", "p-w-1-1", 1, log)
    [(w, wc, code)] = workers_with({1: crashed}, [crashed]).exited()
    assert exit_message(w, wc, code) == ("worker w1 (container p-w-1-1) exited with code 1, last log line: "
                                         "ValueError: boom")
    assert exit_message(w, wc, 137).endswith("code 137 (SIGKILL)")  # a kill says nothing of its own
