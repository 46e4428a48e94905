"""Duration samples of the runner: both measurements, every n-th item sampled; busy and CPU time,
run-queue delay."""
from __future__ import annotations

import threading
import time

import pytest

from operators.metrics import BusyTime, ContainerCpu, CpuTime, Metrics, RunDelay, cgroup_cpu_s, duration_ms
from operators.schedstat import ChildDelays


def test_milliseconds_is_completion_minus_the_upstream_send_time():
    assert duration_ms("milliseconds", 1_000_250, 1_000_000, amqp_timestamp_s=999) == 250


def test_seconds_truncated_uses_the_amqp_timestamp_in_whole_seconds():
    # sent 0.999 s into second 1000 and done 1 ms later: visp measured 1 s more than it took
    assert duration_ms("seconds_truncated", 1_001_000, 1_000_999, amqp_timestamp_s=1000) == 1000
    assert duration_ms("seconds_truncated", 1_001_000, 1_000_999, amqp_timestamp_s=None) == 1000  # Kafka


def test_unknown_measurement_fails():
    with pytest.raises(ValueError):
        duration_ms("minutes", 1, 0, None)


def test_every_nth_completed_item_is_sampled_starting_with_the_first():
    m = Metrics("p", "O3", "i", sample_every=3, clock=lambda: 5.0)
    got = [m.completed(sent_ms=100, amqp_timestamp_s=None, completed_ms=100 + k) for k in range(10)]
    assert got == [0, None, None, 3, None, None, 6, None, None, 9]
    assert m.now_ms() == 5000


def test_counters_accumulate_into_totals():
    m = Metrics("p", "O3", "i")
    m.processed(3)
    m.processed()
    m.dead()
    assert (m.totals.processed, m.totals.dead) == (4, 1)


class Clock:
    def __init__(self, t: float = 0.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_busy_time_is_split_exactly_at_each_take_and_summed_over_slots():
    clock = Clock()
    busy = BusyTime(clock)
    busy.start(0)
    clock.t = 1.0
    assert busy.take() == 1.0  # slot 0 busy for the whole interval
    busy.start(1)
    clock.t = 1.5
    busy.stop(0)
    clock.t = 3.0
    assert busy.take() == 0.5 + 2.0  # slot 0 until it stopped, slot 1 since it started
    busy.stop(1)
    assert busy.take() == 0.0 and busy.busy_slots() == 0


class Pipe:
    """Records a metrics flush (a redis pipeline's xadd / hincrby)."""

    def __init__(self, fail: bool = False):
        self.fail = fail
        self.entries = []

    def pipeline(self, transaction=False):
        return self

    def xadd(self, _stream, fields):
        self.entries.append(fields)

    def hincrby(self, *_args):
        pass

    def execute(self):
        if self.fail:
            raise ConnectionError("Redis away")


def test_count_entries_carry_emitted_and_busy_ms_since_the_previous_one():
    m = Metrics("p", "O3", "i", clock=lambda: 5.0)
    clock = Clock()
    m.busy = BusyTime(clock)
    m.busy.start(0)
    clock.t = 0.2004
    m.busy.stop(0)
    m.processed(2, emitted=6)
    assert m.flush(Pipe(fail=True)) is False  # kept for the next flush
    m.processed(1, emitted=3)
    m.busy.start(0)  # still busy at the flush: counted up to it
    clock.t = 0.5006
    redis = Pipe()
    assert m.flush(redis) is True
    [count] = redis.entries
    assert (count["processed"], count["emitted"], count["busy_ms"], count["dead"]) == (3, 9, 501, 0)
    clock.t = 0.7003  # 199.7 ms more, less the 0.6 ms written ahead: the entries sum to the busy time
    redis = Pipe()
    m.flush(redis)
    assert redis.entries[0]["busy_ms"] == 199 and redis.entries[0]["emitted"] == 0
    assert (m.totals.processed, m.totals.emitted) == (3, 9) and m.busy_total_s == pytest.approx(0.7)


def test_cpu_time_sums_the_slots_clocks_and_the_children_exactly_at_each_take():
    clocks = {7: 1.0, 8: 5.0}
    children = Clock(2.0)
    cpu = CpuTime(read_clock=clocks.__getitem__, children=children)
    cpu.register(0, clock=7)
    cpu.register(1, clock=8)
    clocks[7], clocks[8], children.t = 1.25, 5.5, 2.5  # a tesseract run of 0.5 s reaped
    assert cpu.take() == pytest.approx(0.25 + 0.5 + 0.5)
    clocks[7] = 1.5
    cpu.unregister(0)  # the worker ends: what it used since the last take still counts once
    clocks[8] = 5.75
    assert cpu.take() == pytest.approx(0.25 + 0.25) and cpu.take() == 0.0


def test_cpu_time_leaves_out_the_wait_that_busy_wall_time_counts():
    """Two slots, each 50 ms of work by its own measure: one computing, one waiting (as for a CPU or a
    reply). Only the computing one's 50 ms count, however crowded the machine running the test is."""
    cpu = CpuTime()
    worked, done = threading.Barrier(3), threading.Event()

    def worker(slot: int, spin: bool) -> None:
        cpu.register(slot)
        start = time.thread_time()
        if spin:
            while time.thread_time() - start < 0.05:
                pass
        else:
            time.sleep(0.05)
        worked.wait()
        done.wait()
        cpu.unregister(slot)

    threads = [threading.Thread(target=worker, args=(0, True)), threading.Thread(target=worker, args=(1, False))]
    for t in threads:
        t.start()
    worked.wait()
    used = cpu.take()
    done.set()
    for t in threads:
        t.join()
    assert 0.05 <= used < 0.065


def test_the_containers_cgroup_counter_v2_then_v1(tmp_path):
    v2, v1 = tmp_path / "cpu.stat", tmp_path / "cpuacct.usage"
    v2.write_text("usage_usec 2500000\nuser_usec 2000000\n")
    v1.write_text("3000000000\n")
    assert cgroup_cpu_s([(str(v2), 1e-6), (str(v1), 1e-9)]) == pytest.approx(2.5)
    assert cgroup_cpu_s([(str(tmp_path / "none"), 1e-6), (str(v1), 1e-9)]) == pytest.approx(3.0)
    assert cgroup_cpu_s([(str(tmp_path / "none"), 1e-6)]) is None
    reads = iter([1.0, 1.4, None])
    container = ContainerCpu(read=lambda: next(reads))
    assert container.take() == pytest.approx(0.4) and container.take() is None


def test_count_entries_carry_cpu_ms_beside_busy_ms():
    m = Metrics("p", "O1", "i", clock=lambda: 5.0)
    clocks, children = {3: 0.0}, Clock(0.0)
    m.cpu = CpuTime(read_clock=clocks.__getitem__, children=children)
    m.cpu.register(0, clock=3)
    m.container = ContainerCpu(read=lambda: None)  # outside a container: no field
    clocks[3], children.t = 0.0104, 0.2  # the thread's decoding and the OCR process's 200 ms
    assert m.flush(Pipe(fail=True)) is False
    redis = Pipe()
    m.flush(redis)
    [count] = redis.entries
    assert count["cpu_ms"] == 210 and "container_cpu_ms" not in count
    readings = iter([10.0, 10.75])
    m.container = ContainerCpu(read=lambda: next(readings))
    redis = Pipe()
    m.flush(redis)
    assert redis.entries[0]["cpu_ms"] == 0 and redis.entries[0]["container_cpu_ms"] == 750


def test_without_a_thread_cpu_clock_no_cpu_time_is_reported():
    def unreadable(_clock: int) -> float:
        raise OSError("no such clock")

    m = Metrics("p", "O3", "i", clock=lambda: 5.0)
    m.cpu = CpuTime(read_clock=unreadable, children=lambda: 0.0)
    m.cpu.register(0, clock=1)  # the worker goes on, its CPU time unknown rather than 0
    redis = Pipe()
    m.flush(redis)
    assert "cpu_ms" not in redis.entries[0] and m.cpu.take() == 0.0


def test_run_queue_delay_counts_only_inside_busy_periods_split_at_each_take():
    """A slot's thread waits for a CPU 5 ms before its busy period (a woken worker), 30 ms inside it
    (split by a take in the middle) and 7 ms after: 30 ms count, and the 12 ms a reaped child waited."""
    delays = {41: 1_000_000}  # tid -> run-queue delay so far, ns
    children = ChildDelays()
    delay = RunDelay(read=delays.get, children=children)
    delay.register(0, tid=41)
    delays[41] += 5_000_000
    delay.start(0)
    delays[41] += 10_000_000
    assert delay.take() == pytest.approx(0.010)  # in progress: counted up to the take
    delays[41] += 20_000_000
    children.add(12_000_000)
    delay.stop(0)
    delays[41] += 7_000_000
    assert delay.take() == pytest.approx(0.020 + 0.012) and delay.take() == 0.0
    delay.unregister(0)
    assert delay.available


def test_count_entries_carry_run_delay_ms_and_none_where_the_delay_is_unreadable():
    m = Metrics("p", "O1", "i", clock=lambda: 5.0)
    delays = {7: 0}
    m.delay = RunDelay(read=delays.get, children=ChildDelays())
    m.delay.register(0, tid=7)
    m.delay.start(0)
    delays[7] = 40_400_000
    m.delay.stop(0)
    assert m.flush(Pipe(fail=True)) is False  # kept for the next flush
    redis = Pipe()
    m.flush(redis)
    assert redis.entries[0]["run_delay_ms"] == 40
    m.delay = RunDelay(read=lambda _tid: None, children=ChildDelays())
    m.delay.register(0, tid=7)  # no schedstat (another kernel): unknown rather than 0
    redis = Pipe()
    m.flush(redis)
    assert "run_delay_ms" not in redis.entries[0] and not m.delay.available


def test_a_real_threads_delay_stays_within_its_busy_wall_time():
    """On this machine's own scheduler: a worker computing 50 ms waits for a CPU at most as long as
    its busy period lasted, whatever else runs."""
    delay, busy = RunDelay(), BusyTime()
    got = {}

    def worker() -> None:
        delay.register(0)
        busy.start(0)
        delay.start(0)
        start = time.thread_time()
        while time.thread_time() - start < 0.05:
            pass
        delay.stop(0)
        busy.stop(0)
        got["delay"], got["busy"] = delay.take(), busy.take()
        delay.unregister(0)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert delay.available and 0.0 <= got["delay"] <= got["busy"] - 0.05 + 0.002
