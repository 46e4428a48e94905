"""Job mode (testbed/sim/job.py): Flink's key-group assignment, the capacity normalisation, and a
stop-the-world rescale with replay since the last checkpoint, on hand-computed states."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pytest

from testbed.model import ScaleTo
from testbed.policies.contract import Policy
from testbed.policies.job_inputs import JOB_OPERATOR
from testbed.policies.static_n import StaticNParams, StaticNPolicy
from testbed.sim.job import JobSimulation, worker_shares
from testbed.workloads.daedalus import DURATION_S, WORKLOADS, as_machines, rates
from tests.conftest import compose_config


def test_key_groups_map_to_workers_as_flink_does():
    weights = np.full(4, 0.25)
    groups = np.array([0, 63, 64, 127])
    assert worker_shares(weights, groups, 2, 128).tolist() == [0.5, 0.5]  # kg*2//128: 0 0 1 1
    assert worker_shares(weights, groups, 3, 128).tolist() == [0.25, 0.5, 0.25]  # 0 1 1 2
    assert worker_shares(weights, groups, 5, 128).tolist() == [0.25, 0.0, 0.5, 0.0, 0.25]  # 0 2 2 4


@dataclass
class Flat:
    """A constant workload (the job simulator reads `rates`)."""

    value: float
    seconds: int
    rates: np.ndarray = field(init=False)

    def __post_init__(self):
        self.rates = np.full(self.seconds, self.value)


class RescaleOnce(Policy):
    """A scripted controller: 12 workers, one rescale to `to` at `at` seconds (a test driver)."""

    name = "scripted"
    interval_s = 10.0

    def __init__(self, at: float, to: int):
        self.at, self.to = at, to

    def initial_parallelism(self, top):
        return 12

    def decide_job(self, snap):
        if snap.t == self.at:
            return [ScaleTo(JOB_OPERATOR, self.to, "scripted")]
        return []


def _cfg(minutes: float = 10.0):
    return compose_config("evaluation=daedalus", f"duration_min={minutes}", "job.latency_samples=6000")


def test_static_job_keeps_up_and_only_base_latency():
    cfg = _cfg()
    sim = JobSimulation(cfg, StaticNPolicy(StaticNParams(12)), Flat(1000.0, 600), seed=3)
    # peak = 0.9 x C(12): C(12) = 1000 / 0.9
    assert sim.capacity(12) == pytest.approx(1000.0 / 0.9)
    res = sim.run()
    assert res.details["job"]["unprocessed_at_end"] == 0
    assert sum(res.tables["processed"]["items"]) == pytest.approx(600_000, abs=40)
    lat = res.tables["latency"]["latency_ms"]
    assert len(lat) == 6000  # every 100th of 600,000 items
    assert max(lat) == pytest.approx(cfg.job.base_latency_ms)
    assert res.tables["rescales"]["t_s"] == []


def test_rescale_stops_the_world_and_replays_since_the_checkpoint():
    cfg = _cfg()
    sim = JobSimulation(cfg, RescaleOnce(at=110.0, to=18), Flat(1000.0, 600), seed=3)
    assert sim.capacity(18) > 1000  # (keys of seed 3: C(18) = C(12) = 1000/0.9)
    first = sim.first_checkpoint
    last_ckpt = math.ceil(first) + 30 * math.floor((110 - math.ceil(first)) / 30)  # offsets taken at whole seconds
    res = sim.run()
    r = res.tables["rescales"]
    assert r["t_s"] == [110.0] and (r["from_n"], r["to_n"]) == ([12], [18])
    assert r["replayed"] == [1000 * (110 - last_ckpt)] and r["replayed"][0] > 0
    down = r["downtime_s"][0]
    assert 20 <= down <= 40  # scale-out: ~U(20, 40)
    # every item is processed, the replayed ones twice
    assert res.details["job"]["unprocessed_at_end"] == 0
    # rounded per 15 s
    assert sum(res.tables["processed"]["items"]) == pytest.approx(600_000 + r["replayed"][0], abs=40)
    # backlog after the restart: the downtime's arrivals plus the replay, drained at C(18) - 1000 per second
    # until at most one second of arrivals waits
    backlog = 1000 * down + r["replayed"][0]
    drain = math.ceil((backlog - 1000) / (sim.capacity(18) - 1000.0))
    assert r["recovered_s"][0] == pytest.approx(down + drain, abs=1)
    # each sampled item is counted once: 600,000 / 100 samples
    assert len(res.tables["latency"]["latency_ms"]) == 6000
    kinds = res.tables["actions"]["action"]
    assert kinds.count("scale_up") == 6 and kinds.count("restart") == 1


def test_workloads_match_the_catalogue():
    rng = np.random.default_rng(7)
    wc = rates("wc_sine", rng)
    assert len(wc) == DURATION_S
    clean = WORKLOADS["wc_sine"].build()
    assert clean[0] == 22_500 and clean[2_700] == 40_000 and clean.min() == 5_000  # starts at the mean, peak at 2,700 s
    ysb = rates("ysb_avazu", rng)
    assert ysb.min() == 0 and ysb.max() == pytest.approx(400_000)
    assert abs(int(np.argmax(ysb)) - 11_921) < 120
    tm = WORKLOADS["tm_two_spike"].build()
    assert tm[16_438] == pytest.approx(99_989)
    assert as_machines(np.array([0.0, 50.0, 100.0]), 8).tolist() == [1, 4, 8]


def test_a_scale_out_starts_its_workers_while_the_old_ones_keep_processing():
    overrides = ("evaluation=daedalus", "duration_min=10", "job.latency_samples=6000",
                 "job.start_delay_s=[15,15]", "job.downtime_out_s=[2,2]")
    res = JobSimulation(compose_config(*overrides), RescaleOnce(at=110.0, to=18), Flat(1000.0, 600), seed=3).run()
    r = res.tables["rescales"]
    # the rescale is the decision's; its downtime is the start plus the stop
    assert r["t_s"] == [110.0] and r["downtime_s"] == [17.0]
    assert _restarts(res) == [125.0]  # the job stops only once the new workers have started
    # the old 12 workers kept up meanwhile: the lag before the stop is at most one second of arrivals
    assert r["lag_before"][0] <= 1000
    assert res.details["job"]["unprocessed_at_end"] == 0
    # a scale-in starts nothing: it stops at once
    down = JobSimulation(compose_config(*overrides), RescaleOnce(at=110.0, to=6), Flat(500.0, 600), seed=3).run()
    assert _restarts(down) == [110.0]


def _restarts(res):
    actions = res.tables["actions"]
    return [t for t, a in zip(actions["t_s"], actions["action"], strict=True) if a == "restart"]
