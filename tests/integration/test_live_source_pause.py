"""The live DABS-like restart with the sources' trace paused (`policies.dabs.source=pause`,
docs/papers/presps.md#the-authors-harness-the-trace-paused): the compressed presps_live scenario of
test_live_presps.py, DABS-like only. During each downtime the provider's gate skips the due ticks;
afterwards each tick reads the pattern at its time minus the time skipped, so the load steps (3
machines, 12 from pattern time 30 s, 3 again from 60 s) come later by the downtimes before it, and the run's last ticks
of the trace are never emitted.

Checked: every item emitted is accounted for per operator; nothing is held or dropped at the
source; no tick is published inside a downtime; the load table has one row per emitted tick, and
each row's machines are the pattern's at its time minus the ticks skipped before it."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from testbed.eventlog import read_manifest
from testbed.experiment import run_experiment
from tests.integration.test_live_presps import SCENARIO, STEP_S, check_accounting, table, whole_downtimes
from tests.integration.test_live_run import config

pytestmark = [pytest.mark.integration, pytest.mark.live, pytest.mark.usefixtures("cpu_hog")]


@pytest.fixture(scope="module")
def run(tmp_path_factory, rabbitmq_url, redis_url, docker_url, operator_images) -> Path:
    out = tmp_path_factory.mktemp("live-pause")
    t0 = time.monotonic()
    [d] = run_experiment(config(*SCENARIO, "evaluation.only=[dabs]", "policies.dabs.source=pause", f"out={out}"))
    m = read_manifest(d)
    print(f"dabs (source=pause): {time.monotonic() - t0:.0f} s", d,
          json.dumps(m.details.get("accounting"), sort_keys=True))
    return d


def test_the_paused_trace_resumes_where_it_stopped_and_nothing_is_lost(run):
    acc = check_accounting(run)
    manifest = read_manifest(run)
    restarts = table(run, "actions").query("action == 'restart'")
    assert len(restarts) >= 1 and restarts.reason.str.contains("the sources' trace paused").all()
    assert manifest.details["provider_held_ticks"] == 0 and manifest.details["provider_dropped_items"] == 0
    # 1 s ticks skipped during each 10 s downtime (the gate opens with the replicas, <= 1 s late)
    whole = whole_downtimes(run, restarts)
    paused = manifest.details["provider_paused_ticks"]
    assert 8 * len(whole) <= paused <= 12 * len(restarts), (paused, restarts.t_s.tolist())
    load = table(run, "load")
    per_tick = load.groupby("t_s").agg(machines=("machines", "first"), items=("items", "sum"))
    ticks = per_tick.index.to_numpy()
    tick_s = float(ticks[1] - ticks[0])
    n_ticks = round(float(manifest.resolved_config["duration_min"]) * 60.0 / tick_s)
    assert len(ticks) == n_ticks - paused  # the trace's last `paused` ticks are never emitted
    assert int(per_tick["items"].sum()) == sum(acc["emitted"].values())  # published = in the load table
    # each emitted tick reads the pattern at its time minus the ticks skipped before it
    all_ticks = [k * tick_s for k in range(n_ticks)]
    emitted = set(ticks.tolist())
    skipped_before = 0
    for t in all_ticks:
        if t not in emitted:
            skipped_before += 1
            continue
        trace_t = t - skipped_before * tick_s
        # the levels [3, 12] repeat, each held STEP_S
        assert per_tick.loc[t, "machines"] == (3, 12)[int((trace_t + 1e-9) // STEP_S) % 2], (t, trace_t)
    # the skipped ticks lie in the downtimes
    for t in all_ticks:
        if t not in emitted and t < ticks.max():
            assert any(r <= t <= r + 11.0 for r in restarts.t_s), t
    # nothing published inside a downtime (the provider's own counts per monitoring interval): at
    # most the one tick that raced the decision
    edges = table(run, "edges").query("source == 'S'")
    most = int(per_tick["items"].max())
    inside = [edges[(edges.t_s > t + 4) & (edges.t_s < t + 9.5)]["items"] for t in whole]
    assert all(int(i.sum()) <= most for i in inside), [i.tolist() for i in inside]
