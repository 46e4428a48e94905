"""The Flink job mode's pure parts (testbed/live/flink_job.py) and its configuration: the workload as
the source's schedule, and bad settings named before anything starts. The runs themselves are in
tests/integration/test_flink_job_mode.py."""
from __future__ import annotations

import numpy as np
import pytest

from testbed.config import ConfigError
from testbed.experiment import config_for, plan_runs
from testbed.live.flink_job import run_schedule, workload_rates
from tests.conftest import compose_config


class Rates:
    def __init__(self, rates):
        self.rates = np.asarray(rates, dtype=float)


def test_the_workload_is_compressed_then_scaled_to_its_peak():
    r = workload_rates(Rates([1, 1, 2, 2, 4, 4]), duration_s=3, compression=2, peak_rate=40.0)
    assert r.tolist() == [10.0, 20.0, 40.0]


def test_a_short_workload_holds_its_last_rate_and_a_long_one_is_cut():
    assert workload_rates(Rates([1, 2]), 4, 1, 2.0).tolist() == [1.0, 2.0, 2.0, 2.0]
    assert workload_rates(Rates([1, 2, 4, 8]), 2, 1, 4.0).tolist() == [2.0, 4.0]


def test_a_workload_without_rates_is_refused():
    with pytest.raises(ValueError, match="rates"):
        workload_rates(object(), 10, 1, 1.0)


def test_the_schedule_ends_with_the_run_so_that_what_is_due_can_be_drained():
    s = run_schedule(np.array([3.0, 3.0, 5.0]))
    assert s.due_at(3.0) == 11 and s.due_at(100.0) == 11 and s.total() == 11


def test_flink_runs_are_named_beside_the_simulated_ones_and_compressed(tmp_path):
    cfg = compose_config("evaluation=daedalus_flink", "reps=1", f"out={tmp_path}", "evaluation.only=[daedalus]")
    [spec] = plan_runs(cfg)
    assert spec.config == "daedalus-flink"
    run_cfg = config_for(cfg, spec)
    f = cfg.backend.flink.time_compression
    assert run_cfg.duration_min == pytest.approx(cfg.duration_min / f)
    assert run_cfg.job.checkpoint_s == pytest.approx(cfg.job.checkpoint_s / f)


@pytest.mark.parametrize("override, key", [
    ("backend.flink.settings.stop_mode=nice", "backend.flink.settings.stop_mode"),
    ("+backend.flink.settings.no_such_key=1", "backend.flink.settings.no_such_key"),
    ("backend.flink.settings.wait_us=-1", "backend.flink.settings.wait_us"),
    ("backend.flink.tm_rate=0", "backend.flink.tm_rate"),
    ("backend.flink.time_compression=0.5", "backend.flink.time_compression"),
])
def test_bad_flink_settings_are_named(override, key, tmp_path):
    with pytest.raises(ConfigError) as err:
        compose_config("evaluation=daedalus_flink", f"out={tmp_path}", override)
    assert err.value.key == key, str(err.value)


def test_flink_runs_job_mode_only(tmp_path):
    with pytest.raises(ConfigError) as err:
        compose_config("backend=flink", f"out={tmp_path}")
    assert err.value.key == "backend" and "job mode" in str(err.value)
