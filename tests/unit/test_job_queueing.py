"""The job model's queueing below capacity and its engine-like CPU reading (testbed/sim/job.py), and
the load ramp that compares it with Flink (testbed/fidelity/ramp.py, ramp_sim.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from testbed.fidelity.ramp import (
    Interval,
    RampSpec,
    band_latency,
    band_of,
    cgroup_fit,
    compare,
    overload_capacity,
    per_second_rates,
    points,
    reading_fit,
    within,
)
from testbed.fidelity.ramp_sim import ramp_config, simulate, simulated_bands, with_job
from testbed.policies.static_n import StaticNParams, StaticNPolicy
from testbed.sim.job import JobSimulation
from tests.conftest import compose_config

SPEC = RampSpec(capacity=20.0, band_s=60.0, warmup_s=10.0, settle_s=5.0)
QUEUEING = dict(service_cv=0.2, batch_wait_ms=50.0, base_latency_ms=100.0)


@pytest.fixture(scope="module")
def cfg():
    return ramp_config(SPEC, SPEC.capacity)


def test_ramp_schedule_and_bands():
    assert points(SPEC)[0] == (0.0, 4.0) and points(SPEC)[1] == (10.0, 4.0) and points(SPEC)[-1] == (610.0, 0.0)
    rates = per_second_rates(SPEC)
    assert len(rates) == 610 and rates[9] == 4.0 and rates[70] == pytest.approx(8.0)
    assert rates[609] == pytest.approx(28.0)
    assert band_of(SPEC, 12.0) is None  # the first band's settling seconds
    assert band_of(SPEC, 16.0) == 0 and band_of(SPEC, 75.0) == 1 and band_of(SPEC, 610.0) is None
    rows = [Interval(16.0, 10.0, 1000.0), Interval(17.0, 30.0, 6000.0), Interval(12.0, 5.0, 9e9)]
    b = band_latency(SPEC, rows)[0]
    assert b.mean_ms == pytest.approx(7000.0 / 40.0) and b.intervals == 2  # weighted by words
    assert b.p95_ms == pytest.approx(100.0 + 0.95 * 100.0)  # of the interval means 100 and 200


def test_reading_fit_finds_a_known_lag_and_bias():
    rng = np.random.default_rng(1)
    truth = np.clip(np.cumsum(rng.normal(0, 0.1, 300)) % 1.0, 0, 1)
    reading = np.concatenate([np.full(4, np.nan), truth[:-4]]) - 0.2  # 4 steps behind, 0.2 low
    fit = reading_fit(reading, truth, 0.5, 5.0)
    assert fit.lag_s == 2.0 and fit.bias == pytest.approx(-0.2) and fit.sd == pytest.approx(0.0, abs=1e-9)


def test_overload_capacity_is_what_the_overloaded_bands_carried():
    rows = [Interval(SPEC.warmup_s + 6 * SPEC.band_s + 10.0, 8 * 21.0, 0.0),  # 100 %: not overload
            Interval(SPEC.warmup_s + 7 * SPEC.band_s + 10.0, 8 * 19.0, 0.0, dt=1.0),
            Interval(SPEC.warmup_s + 9 * SPEC.band_s + 10.0, 8 * 20.0, 0.0, dt=0.5)]
    assert overload_capacity(SPEC, rows, 8) == pytest.approx((19.0 + 40.0) / 2)


def test_the_fluid_default_queues_nothing_below_capacity(cfg):
    bands = simulate(SPEC, with_job(cfg, base_latency_ms=100.0)).bands()
    assert [b.mean_ms for b in bands if b.fraction < 1.0] == pytest.approx([100.0] * 6)


def test_latency_rises_before_capacity(cfg):
    bands = simulated_bands(SPEC, with_job(cfg, **QUEUEING))
    by = {b.fraction: b.mean_ms for b in bands}
    assert by[0.2] == pytest.approx(100.0 + 0.2 * 50.0, rel=0.05)  # the floor and a little batch wait
    # the knee below capacity: from 60 to 90 % far more than the batch wait's linear 0.3 x 50 ms
    assert by[0.9] - by[0.6] > 3 * 0.3 * 50.0 and by[0.7] > by[0.6]


def test_latency_is_monotone_in_load(cfg):
    means = [b.mean_ms for b in simulated_bands(SPEC, with_job(cfg, **QUEUEING))]
    assert all(b > a for a, b in zip(means, means[1:], strict=False)), means


def test_backlog_grows_in_overload_at_the_excess_rate():
    c = compose_config("evaluation=daedalus_flink", "backend=sim", "job.max_scaleout=1", "job.initial_parallelism=1",
                       "job.capacity_workers=1", "job.peak_fraction=1.25", "duration_min=2", "job.service_cv=0.2",
                       "runtime.monitoring_s=1")

    class Over:
        rates = np.full(120, 25.0)  # 125 % of a capacity of 20

    res = JobSimulation(c, StaticNPolicy(StaticNParams(1)), Over(), seed=1).run()
    lag = np.asarray(res.tables["queues"]["depth"], dtype=float)
    assert lag[-1] == pytest.approx(5.0 * 120, rel=0.1)  # 5 items/s more than it carries
    lat = np.asarray(res.tables["latency"]["latency_ms"])
    assert lat[-100:].mean() > 10 * lat[:100].mean()


def _reading_run(**job):
    c = compose_config("evaluation=daedalus_flink", "backend=sim", "job.max_scaleout=1", "job.initial_parallelism=1",
                       "job.capacity_workers=1", "job.peak_fraction=1.0", "duration_min=1", "job.cpu_noise=0",
                       "runtime.monitoring_s=1",
                       *[f"job.{k}={v}" for k, v in job.items()])

    class Step:
        rates = np.concatenate([np.full(30, 4.0), np.full(30, 16.0)])  # 0.25, then 1.0 of the capacity

    res = JobSimulation(c, StaticNPolicy(StaticNParams(1)), Step(), seed=1).run()
    cpu = np.asarray(res.tables["instance_stats"]["utilisation"], dtype=float)
    return cpu


def test_cpu_reading_lags_and_is_biased():
    true = _reading_run()
    assert true[10] == pytest.approx(0.25) and true[40] == pytest.approx(1.0)
    read = _reading_run(cpu_lag_s=5, cpu_bias=-0.1)
    assert read[32] == pytest.approx(0.25 - 0.1)  # still the load of 5 s before
    assert read[36] == pytest.approx(0.9) and read[10] == pytest.approx(0.15)
    assert _reading_run(cpu_bias=0.2)[40] == 1.0  # held in [0, 1]


def test_cpu_reading_as_a_windowed_metric_updated_in_steps():
    read = _reading_run(cpu_window_s=10, cpu_update_s=5)  # Flink's busy time: 60 s, every 5 s
    assert read[33] == pytest.approx(0.25)  # the update at 30 s saw seconds 20-29
    assert read[34] == pytest.approx((5 * 0.25 + 5 * 1.0) / 10)  # the one at 35 s, seconds 25-34
    assert read[38] == pytest.approx(read[34]) and read[44] == pytest.approx(1.0)


def test_the_cgroup_reading_adds_the_taskmanagers_overhead_and_reads_one_at_capacity():
    read = _reading_run(cpu_reading="cgroup", cgroup_overhead=0.3)
    assert read[10] == pytest.approx(0.3 + 0.7 * 0.25) and read[40] == pytest.approx(1.0)
    windowed = _reading_run(cpu_reading="cgroup", cgroup_overhead=0.3, cpu_window_s=10, cpu_update_s=5)
    assert windowed[34] == pytest.approx(0.3 + 0.7 * (5 * 0.25 + 5 * 1.0) / 10)  # windowed as the busy reading
    assert _reading_run(cpu_reading="cgroup")[10] == pytest.approx(0.25)  # no overhead: the utilisation


def test_the_cgroup_overhead_is_fitted_from_a_ramps_intervals():
    spec = RampSpec(capacity=20.0, fractions=(0.2, 0.5, 0.8, 1.2), band_s=30.0, warmup_s=10.0)
    rng = np.random.default_rng(3)
    u = np.minimum(per_second_rates(spec) / spec.capacity, 1.0)  # the overloaded band carries its capacity
    share = 0.3 + 0.7 * u + rng.normal(0, 0.05, len(u))
    rows = [Interval(float(t), 8 * u[t] * spec.capacity, 0.0, cpu_share=share[t]) for t in range(len(u))]
    fit = cgroup_fit(spec, rows, spec.capacity, 8)
    assert fit.overhead == pytest.approx(0.3, abs=0.02) and fit.sd == pytest.approx(0.05, abs=0.01)
    assert fit.n == len(range(11, 100))  # after the warm-up, below capacity: the 0.2, 0.5 and 0.8 bands
    with pytest.raises(ValueError, match="fewer than 10"):
        cgroup_fit(spec, rows[:15], spec.capacity, 8)


def test_the_cgroup_profile_is_the_cpu_modes_queueing_read_from_the_cgroup(tmp_path):
    c = compose_config("evaluation=daedalus_flink", "backend=sim", "profile=flink_cpu_cgroup", f"out={tmp_path}")
    q = compose_config("evaluation=daedalus_flink", "backend=sim", "profile=flink_cpu_queue", f"out={tmp_path}")
    assert (c.job.cpu_reading, q.job.cpu_reading) == ("cgroup", "busy") and 0.2 < c.job.cgroup_overhead < 0.4
    assert (c.job.service_cv, c.job.downtime_out_s) == (q.job.service_cv, q.job.downtime_out_s)
    assert (c.job.cpu_window_s, c.job.cpu_bias) == (72, 0.0)  # the cgroup read each real second (x 72)


def test_compare_and_verdict():
    spec = RampSpec(fractions=(0.5, 1.2))
    sim = band_latency(spec, [])
    assert all(math.isnan(b.mean_ms) for b in sim)
    from testbed.fidelity.ramp import BandLatency

    s = [BandLatency(0.5, 120.0, 150.0, 5), BandLatency(1.2, 1000.0, 1500.0, 5)]
    f1 = [BandLatency(0.5, 100.0, 140.0, 5), BandLatency(1.2, 900.0, 1400.0, 5)]
    f2 = [BandLatency(0.5, 110.0, 160.0, 5), BandLatency(1.2, 700.0, 1000.0, 5)]
    rows = compare(s, [f1, f2])
    assert rows[0].flink_mean_ms == 105.0 and rows[0].flink_range_ms == (100.0, 110.0)
    assert within(rows) and not within(compare(s, [f2, f2]), 0.1)


def test_new_job_settings_are_validated():
    from testbed.job_config import JobConfig

    assert JobConfig(service_cv=-0.1).validate()[0] == "job.service_cv"
    assert JobConfig(batch_wait_ms=-1).validate()[0] == "job.batch_wait_ms"
    assert JobConfig(cpu_bias=1.5).validate()[0] == "job.cpu_bias"
    assert JobConfig(cpu_lag_s=-1).validate()[0] == "job.cpu_lag_s"
    assert JobConfig(cpu_reading="pod").validate()[0] == "job.cpu_reading"
    assert JobConfig(cpu_reading="cgroup", cgroup_overhead=1.0).validate()[0] == "job.cgroup_overhead"
    assert JobConfig(cgroup_overhead=0.3).validate()[0] == "job.cgroup_overhead"  # the busy reading has none
    assert JobConfig(cpu_reading="cgroup", cgroup_overhead=0.3).validate() is None
    assert JobConfig().validate() is None
