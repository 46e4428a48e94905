"""Job mode on the live testbed (docs/papers/daedalus.md#live-runtime): keyed worker containers
(image testbed-job, 0.1 core each), RabbitMQ's consistent-hash exchange, stop-the-world rescales;
one short run per controller, 60 s of wall time each (6 min of the paper's time, compressed by 6).

Scenario: wc_sine's first 6 minutes normalised so that their peak is 0.9 x C(2); at most 6 workers.
Daedalus starts with one worker, which the load saturates (C(1) is below the workload): once its
regression has warmed up (20 s) and the grace after the start (30 s) is over, Algorithm 1 has no
scale-out below 2 to keep and must scale out, whatever its forecast (on the compressed history
auto-ARIMA's forecasts vary from run to run, docs/papers/daedalus.md#live-job-mode-scaled-down,
and a run started with more workers than needed kept them in one run out of four). HPA starts
with one worker too, with Kubernetes' default scale-up window (0): it scales out at a sync. Static
runs 6 workers (static-12, capped at the job's max_scaleout) and never rescales. In each run every
item the source emitted is accounted for (committed, still queued or dead-lettered), the keyed state
counts every committed item once, the containers and the run's broker and Redis state are gone, and
the Daedalus report reads the run."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Dict

import docker
import pandas as pd
import pytest
import redis

from reporting.evaluations.daedalus.measures import run_metrics
from testbed.eventlog import read_manifest
from testbed.experiment import run_experiment
from tests.integration.conftest import ROOT
from tests.integration.runner_helpers import interrupt_experiment
from tests.integration.test_live_run import config, run_containers

pytestmark = [pytest.mark.integration, pytest.mark.live, pytest.mark.usefixtures("cpu_hog")]

SCENARIO = [
    "evaluation=daedalus", "backend=docker", "reps=1", "summary=false", "duration_min=6",
    "job.max_scaleout=6", "job.capacity_workers=2", "job.initial_parallelism=1",
    "policies.hpa.initial_replicas=1", "policies.hpa.up_window_s=0",
    "evaluation.only=[daedalus,hpa-80,static-12]",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, rabbitmq_url, redis_url, docker_url, operator_images) -> Dict[str, Path]:
    out = tmp_path_factory.mktemp("live-job")
    t0 = time.monotonic()
    dirs = run_experiment(config(*SCENARIO, f"out={out}"))
    print(f"live job mode: {len(dirs)} runs in {time.monotonic() - t0:.0f} s")
    by_name = {read_manifest(d).config.removesuffix("-live"): d for d in dirs}
    for name, d in by_name.items():
        m = read_manifest(d)
        res = table(d, "rescales")
        print(name, json.dumps(m.details.get("accounting"), sort_keys=True))
        print(res.to_string() if len(res) else "no rescales")
        print({k: round(v, 2) for k, v in run_metrics(d).items() if k in ("mean_workers", "latency_ms",
                                                                          "latency_p95_ms", "rescales")})
    return by_name


def table(run: Path, name: str) -> pd.DataFrame:
    return pd.read_parquet(run / f"{name}.parquet")


def check_run(run: Path, redis_url: str) -> dict:
    """What every controller's run must show; returns the manifest's details."""
    m = read_manifest(run)
    assert m.status == "complete", m.error
    details = m.details
    acc = details["accounting"]
    assert acc["emitted"] > 3000  # about 60 s at 0.7-0.9 x C(2) (C(2) ~ 200-300 items/s)
    assert acc["missing"] == 0, acc
    assert acc["emitted"] == acc["committed"] + acc["queued_entry"] + acc["queued_workers"] + acc["dead_lettered"]
    assert acc["state_total"] == acc["committed"]  # the keyed state counts each committed item once
    assert acc["processed"] == acc["committed"] + acc["replayed"]
    assert acc["dead_lettered"] == 0
    load = table(run, "load")
    assert int(load["items"].sum()) == acc["emitted"]
    stats = table(run, "instance_stats")
    assert stats.utilisation.between(0.0, 1.5).all() and stats.utilisation.mean() > 0.1  # CPU from the cgroups
    # the per-second counts: all but what was processed after the last full table interval
    assert 0.8 * acc["processed"] <= int(stats.processed.sum()) <= acc["processed"]
    lat = table(run, "latency")
    assert len(lat) > 100 and (lat.latency_ms >= 0).all()
    assert run_containers(details["prefix"]) == []
    client = redis.Redis.from_url(redis_url)
    try:
        assert list(client.scan_iter(f"{details['prefix']}:*", count=1000)) == []
    finally:
        client.close()
    metrics = run_metrics(run)
    assert metrics["mean_workers"] > 0 and metrics["latency_ms"] > 0
    return details


def test_daedalus_rescales_live_and_accounts_for_every_item(runs, redis_url):
    run = runs["daedalus"]
    check_run(run, redis_url)
    res = table(run, "rescales")
    assert len(res) >= 1 and res.from_n.iloc[0] == 1 and res.to_n.iloc[0] > 1
    assert res.t_s.iloc[0] >= 20  # not before the warm-up (20 s) has given the regression samples
    assert (res.downtime_s > 0).all()
    actions = table(run, "actions")
    assert (actions.action == "restart").sum() == len(res)
    assert table(run, "capacity").shape[0] > 0 and table(run, "forecasts").shape[0] > 0  # the controller's own tables


def test_hpa_scales_out_live_and_accounts_for_every_item(runs, redis_url):
    run = runs["hpa-80"]
    check_run(run, redis_url)
    res = table(run, "rescales")
    assert len(res) >= 1 and res.from_n.iloc[0] == 1 and res.to_n.iloc[0] > 1
    inst = table(run, "instances")
    assert inst.hosts.iloc[0] == 1 and inst.hosts.max() > 1


def test_static_never_rescales_and_accounts_for_every_item(runs, redis_url):
    run = runs["static-12"]
    check_run(run, redis_url)
    assert len(table(run, "rescales")) == 0
    inst = table(run, "instances")
    assert (inst.hosts == 6).all()  # static-12 capped at job.max_scaleout


def job_containers(name_prefix: str) -> list:
    client = docker.from_env()
    try:
        return [c.name for c in client.containers.list(all=True, sparse=True, filters={"label": "testbed.run"})
                if c.attrs.get("Names", [""])[0].lstrip("/").startswith(name_prefix)]
    finally:
        client.close()


def test_ctrl_c_removes_the_workers_and_marks_the_run_incomplete(tmp_path, rabbitmq_url, redis_url, docker_url,
                                                                 operator_images):
    args = [a for a in SCENARIO if not a.startswith(("duration_min", "evaluation.only"))]
    args += ["duration_min=60", "evaluation.only=[static-12]", f"out={tmp_path}"]
    name = "wc_sine-static-12-live-1-"
    returncode, output = interrupt_experiment(args, ROOT, lambda: len(job_containers(name)) >= 6, settle_s=10)
    assert returncode == 130, output
    assert job_containers(name) == []
    manifest = read_manifest(tmp_path / "wc_sine" / "static-12-live" / "1")
    assert manifest.status == "incomplete"
