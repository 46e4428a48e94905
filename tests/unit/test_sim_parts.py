"""Parts of the simulator: cloud delays and BTU bookkeeping, sampling and measurement, contention."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from testbed.config import Measurement, Sampling
from testbed.model import LeaseHost, Migrate, ProlongHost, ReleaseHost, ScaleDown, ScaleUp
from testbed.sim.cluster import SimCluster
from testbed.sim.recorder import SampleRecorder
from testbed.topology import Topology
from tests.conftest import compose_config
from tests.unit.test_simulator import frame, simulate


@pytest.fixture
def cluster():
    cfg = compose_config("profile=paper")  # the paper's infrastructure values, not the calibrated ones
    return SimCluster(Topology.from_config(cfg.topology), cfg.infrastructure, btu_s=600.0, price_per_btu=1.0,
                      rng=np.random.default_rng(5))


def test_lease_pull_and_start_delays(cluster):
    cluster.apply(100.0, [LeaseHost("new:h", "r"), ScaleUp("O1", "new:h", "r"), ScaleUp("O1", "new:h", "r"),
                          ScaleUp("O3", "new:h", "r")])
    [host] = cluster.hosts.values()
    assert 130.0 <= host.ready_at <= 160.0 and host.btu_end == 700.0
    o1a, o1b, o3 = cluster.instances.values()
    pull_o1 = 89 / 25.0  # image MB / pull MB/s, once per host and image
    assert host.images["O1"] == pytest.approx(host.ready_at + pull_o1)
    for inst in (o1a, o1b):
        assert host.ready_at + pull_o1 + 5 <= inst.ready_at <= host.ready_at + pull_o1 + 10
    assert host.ready_at + 68 / 25.0 + 5 <= o3.ready_at <= host.ready_at + 68 / 25.0 + 10
    cluster.process_events(host.ready_at + 1.0)
    assert {i.state.value for i in (o1a, o1b, o3)} == {"starting"}
    cluster.process_events(o1a.ready_at)
    assert o1a.state.value == "running"
    # a cached image starts without a pull
    cluster.process_events(1000.0)
    cluster.apply(1000.0, [ScaleUp("O1", host.id, "r")])
    newest = list(cluster.instances.values())[-1]
    assert 1005.0 <= newest.ready_at <= 1010.0


def test_migration_stops_the_old_copy_once_the_new_one_runs_and_release_bills(cluster):
    cluster.apply(0.0, [LeaseHost("new:a", "r"), ScaleUp("O3", "new:a", "r"), LeaseHost("new:b", "r")], immediate=True)
    a, b = cluster.hosts
    [old] = cluster.instances
    cluster.apply(560.0, [ProlongHost(b, "r"), Migrate("O3", old, a, b, "r"), ReleaseHost(a, "r")])
    assert old in cluster.instances and cluster.hosts[a].releasing
    cluster.process_events(600.0)  # new copy ready within 5-10 s: old stopped, host released
    assert old not in cluster.instances and a not in cluster.hosts
    leases = pd.DataFrame(cluster.leases(end_s=1000.0)).set_index("host")
    assert leases.loc[a, "paid_btus"] == 1 and leases.loc[a, "released"]
    assert leases.loc[b, "paid_btus"] == 2 and leases.loc[b, "prolongations"] == 1 and not leases.loc[b, "released"]


def test_release_waits_at_most_until_the_btu_end(cluster):
    cluster.apply(0.0, [LeaseHost("new:a", "r"), ScaleUp("O3", "new:a", "r"), ScaleUp("O4", "new:a", "r")],
                  immediate=True)
    [a] = cluster.hosts
    o3, o4 = cluster.instances
    cluster.apply(580.0, [ScaleDown("O3", o3, a, "r"), ReleaseHost(a, "r")])
    assert a in cluster.hosts  # O4 still there
    cluster.process_events(600.0)
    assert a not in cluster.hosts and not cluster.instances
    assert pd.DataFrame(cluster.leases(end_s=900.0))["end_s"].tolist() == [600.0]


def recorder(every=10, sampling=Sampling.every_nth, measurement=Measurement.milliseconds, cv=0.0):
    return SampleRecorder(["A"], [cv], every, sampling, measurement, seed=3)


def test_every_tenth_item_is_sampled():
    rec = recorder()
    picked = [rec.take(0, 7), rec.take(0, 7), rec.take(0, 7)]
    # items 9, 19 of 21: positions 9 -> chunk 2 index 2, 19 -> chunk 3 index 5
    assert picked == [[], [2], [5]]


def test_probabilistic_sampling_takes_about_a_tenth():
    rec = recorder(sampling=Sampling.probabilistic)
    taken = sum(len(rec.take(0, 1000)) for _ in range(100))
    assert 9_400 < taken < 10_600


def test_seconds_truncated_measurement_adds_a_bias_below_one_second():
    exact, truncated = recorder(), recorder(measurement=Measurement.seconds_truncated)
    for k in range(2000):
        send = k * 0.37
        for rec in (exact, truncated):
            rec.record_finished(0, ["A-1"], send, send + 0.2)
    assert np.allclose(exact.duration_ms, 200.0)
    bias = np.array(truncated.duration_ms) - 200.0
    assert bias.min() >= 0.0 and bias.max() < 1000.0 and 400 < bias.mean() < 600


def test_service_noise_has_the_configured_mean_and_cv():
    rec = recorder(cv=0.3)
    draws = np.array([rec.service(0, 0.05) for _ in range(20_000)])
    assert draws.mean() == pytest.approx(0.05, rel=0.02)
    assert draws.std() / draws.mean() == pytest.approx(0.3, rel=0.05)


def test_cpu_contention_slows_a_crowded_host():
    common = ("policy=threshold", "profile=paper", "pattern=constant", "pattern.levels=[8]", "duration_min=8")
    free, _, _ = simulate(*common)
    crowded, _, _ = simulate(*common, "backend.cpu_contention=true")
    o1 = lambda r: frame(r, "samples").query("operator == 'O1'").duration_ms.mean()  # noqa: E731
    assert o1(crowded) > o1(free)
