"""A short load ramp on a real Flink TaskManager in the cpu mode (docs/flink.md#the-load-ramp): two
bands, 30 % and 150 % of its capacity. The runner must record every interval's words, latency sum,
busy time and cgroup CPU; latency in the overloaded band must exceed the light band's (a backlog
builds), and what the overloaded band carried must be near the limit's capacity. The full ramp is
`make flink-ramp`, not a test. One cluster, about a minute."""
from __future__ import annotations

import dataclasses
import math

import pytest

from testbed.fidelity.ramp import Interval, RampSpec, band_latency, overload_capacity
from testbed.fidelity.ramp_flink import SETTINGS, run_ramp

from .test_flink_engine import flink_installed  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.integration, pytest.mark.live, pytest.mark.slow]

SPEC = RampSpec(capacity=27.6, fractions=(0.3, 1.5), band_s=12.0, warmup_s=6.0, settle_s=3.0)


def test_a_short_ramp_records_bands_and_a_backlog(flink_installed, tmp_path):  # noqa: F811
    settings = dataclasses.replace(flink_installed, **{k: v for k, v in SETTINGS.items()}).validate()
    result = run_ramp(SPEC, settings, tmp_path / "flink")
    rows = [Interval(**r) for r in result["intervals"]]
    bands = band_latency(SPEC, rows)
    print(f"\nbands {bands}, load average {result['load_average']}")
    assert all(b.intervals >= 5 for b in bands), bands
    light, over = bands
    assert over.mean_ms > 2 * light.mean_ms, "a backlog builds at 150 % of the capacity"
    carried = overload_capacity(SPEC, rows, settings.words_per_sentence)
    assert 0.4 * SPEC.capacity < carried < 1.2 * SPEC.capacity, carried  # a loaded machine gives less
    busy = [r.busy for r in rows if not math.isnan(r.busy)]
    assert busy and all(0.0 <= b <= 1.0 for b in busy)
    shares = [r.cpu_share for r in rows if not math.isnan(r.cpu_share)]
    # an interval's share is jittered by when within the reading the cgroup was read; on average it
    # cannot exceed the limit
    assert shares and sum(shares) / len(shares) <= 1.05, "the cgroup holds the TaskManager at its limit"
