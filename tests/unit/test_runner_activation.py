"""Pool activation of the runner without a broker: switched off, it pauses its source, hands back
what it has not started (waiting for a worker or in the rest of a worker's batch), finishes what
is in process, has the source release and only then reports ``inactive``; switched on, it claims
``active`` and resumes. Fakes: tests/unit/runner_fakes.py."""
from __future__ import annotations

import time

import pytest

from operators.api import ACTIVE, INACTIVE, STOPPED, InstanceReport, activation_wanted
from operators.sources import Outcome
from tests.unit.runner_fakes import FlagStore, RunnerFactory, envelope, wait_until


@pytest.fixture
def make_runner():
    factory = RunnerFactory()
    yield factory.make
    factory.close()


def in_process(runner, source, gate: str, token) -> None:
    """Push an item that blocks in the operator until its gate opens."""
    source.push(envelope(token, gate=gate), token=token)
    wait_until(runner.operator.started[gate].is_set)


def test_switch_off_hands_back_the_unstarted_finishes_the_started_then_reports_inactive(make_runner):
    flag = FlagStore()
    runner, source, publisher = make_runner(flag=flag)
    in_process(runner, source, "g1", 1)
    for token in (2, 3, 4):  # all three wait in the work queue: the worker takes them as one batch
        source.push(envelope(token, gate="g2" if token == 2 else None), token=token)
    runner.operator.gates["g1"].set()
    wait_until(runner.operator.started["g2"].is_set)  # 2 in process, 3 and 4 the rest of its batch
    source.push(envelope(5), token=5)  # waits for the worker

    flag.on = False
    wait_until(lambda: len(source.settled) == 3)
    assert sorted(source.settled, key=str) == [(3, Outcome.RELEASE), (4, Outcome.RELEASE), (5, Outcome.RELEASE)]
    assert source.calls == ["pause"] and flag.reports == [ACTIVE]  # 1 and 2 still held
    assert runner.held() == 2

    publisher.confirm(2)  # item 1 done
    runner.operator.gates["g2"].set()
    wait_until(lambda: len(publisher.published) == 4)
    publisher.confirm(2)
    wait_until(lambda: flag.reports == [ACTIVE, INACTIVE])
    assert source.settled[3:] == [(1, Outcome.ACK), (2, Outcome.ACK)]
    assert source.calls == ["pause", "release"]  # released after the last settlement
    assert runner.held() == 0 and runner.stats.released == 3 and runner.stats.processed == 2


def test_what_comes_while_switched_off_is_handed_back_and_a_switch_on_resumes(make_runner):
    flag = FlagStore()
    runner, source, publisher = make_runner(flag=flag)
    flag.on = False
    wait_until(lambda: flag.reports == [ACTIVE, INACTIVE])
    source.push(envelope(1), token=1)  # a late delivery of the source
    assert source.settled == [(1, Outcome.RELEASE)] and runner.held() == 0 and publisher.published == []

    flag.on = True
    wait_until(lambda: source.calls == ["pause", "release", "resume"])
    assert flag.reports == [ACTIVE, INACTIVE, ACTIVE]
    source.push(envelope(2), token=2)
    wait_until(lambda: len(publisher.published) == 2)
    publisher.confirm(2)
    wait_until(lambda: source.settled[-1] == (2, Outcome.ACK))


def test_a_switch_off_completes_before_a_switch_on_is_taken_up(make_runner):
    flag = FlagStore()
    runner, source, publisher = make_runner(flag=flag)
    in_process(runner, source, "g", 1)
    flag.on = False
    wait_until(lambda: source.calls == ["pause"])
    flag.on = True  # back on while item 1 is still in process
    wait_until(lambda: runner.stats.released == 0 and runner.held() == 1)
    assert source.calls == ["pause"] and flag.reports == [ACTIVE]
    runner.operator.gates["g"].set()
    wait_until(lambda: len(publisher.published) == 2)
    publisher.confirm(2)
    wait_until(lambda: source.calls == ["pause", "release", "resume"])
    assert flag.reports == [ACTIVE, INACTIVE, ACTIVE]


def test_an_instance_started_switched_off_consumes_nothing_until_switched_on(make_runner):
    flag = FlagStore(on=False)
    runner, source, _publisher = make_runner(flag=flag)
    assert source.calls[0] == "pause"  # paused before its source started
    wait_until(lambda: flag.reports == [INACTIVE])
    flag.on = True
    wait_until(lambda: source.calls[-1] == "resume")
    assert flag.reports == [INACTIVE, ACTIVE]


def test_a_stop_while_switched_off_reports_stopped(make_runner):
    flag = FlagStore()
    runner, source, _publisher = make_runner(flag=flag)
    flag.on = False
    wait_until(lambda: flag.reports == [ACTIVE, INACTIVE])
    runner.drain()
    assert flag.reports == [ACTIVE, INACTIVE, STOPPED] and source.closed_after == [0]


def test_busy_time_counts_a_long_item_in_each_interval_it_spans_and_nothing_when_idle(make_runner):
    runner, source, publisher = make_runner()
    busy = runner.metrics.busy
    in_process(runner, source, "g", 1)
    busy.take()
    for _ in range(2):  # the item is still in process: each interval gets its share
        time.sleep(0.05)
        assert busy.take() >= 0.05
    runner.operator.gates["g"].set()
    wait_until(lambda: len(publisher.published) == 2)
    wait_until(lambda: busy.busy_slots() == 0)  # the worker waits for the next batch
    busy.take()
    time.sleep(0.05)
    assert busy.take() == 0.0


def test_flag_values_and_report_decoding():
    assert activation_wanted(None) and activation_wanted(b"1") and activation_wanted("1")
    assert not activation_wanted(b"0") and not activation_wanted("0")
    assert InstanceReport.decode('{"state": "inactive", "t_ms": 5}') == InstanceReport(INACTIVE, 5)
    for bad in (None, b"", b"inactive", b'{"state": "sleeping", "t_ms": 5}', b'{"state": "active"}', b"[1]"):
        assert InstanceReport.decode(bad) is None
