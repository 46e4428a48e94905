"""A short live run with the simulator's behaviour switched on in the live operators
(docs/architecture.md#emission, #latency-sampling): O2 and O6 pass every 50th / 100th input
(`emission.live=ratio`) and every instance samples each item with probability 1/10
(`runtime.sampling=probabilistic`); the manifest records both. One machine for two minutes."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from testbed.eventlog import read_manifest
from testbed.experiment import run_experiment
from tests.integration.test_live_run import LIVE, config

pytestmark = [pytest.mark.integration, pytest.mark.live, pytest.mark.usefixtures("cpu_hog")]

SCENARIO = [
    "profile=paper", "pattern=constant", "pattern.levels=[1]", "duration_min=2", "load_scale=0.5", "reps=1",
    "summary=false", "policy=threshold", "runtime.reasoning_s=10", "runtime.monitoring_s=3",
    "infrastructure.lease_delay_s=[2,4]",
    "topology.operators.O2.emission.live=ratio", "topology.operators.O6.emission.live=ratio",
    "runtime.sampling=probabilistic",
]


@pytest.fixture(scope="module")
def run(tmp_path_factory, rabbitmq_url, redis_url, docker_url, operator_images) -> Path:
    out = tmp_path_factory.mktemp("emission")
    [run_dir] = run_experiment(config(*SCENARIO, *LIVE, f"out={out}"))
    return run_dir


def test_the_filters_pass_a_fixed_ratio_and_samples_are_drawn(run):
    manifest = read_manifest(run)
    assert manifest.status == "complete", manifest.error
    assert manifest.details["emission"]["O2"] == {"mode": "ratio", "ratio": "50:1"}
    assert manifest.details["emission"]["O6"] == {"mode": "ratio", "ratio": "100:1"}
    assert manifest.details["latency_sampling"] == {"rule": "probabilistic", "every": 10,
                                                     "measurement": "milliseconds"}
    processed = pd.read_parquet(run / "processed.parquet").groupby("operator")["items"].sum()
    edges = pd.read_parquet(run / "edges.parquet").groupby(["source", "target"])["items"].sum()
    for op, n in (("O2", 50), ("O6", 100)):
        assert processed[op] >= 2 * n
        assert abs(int(edges[(op, "O8")]) - int(processed[op]) // n) <= 1, (op, processed[op], edges[(op, "O8")])
    samples = pd.read_parquet(run / "samples.parquet").groupby("operator").size()
    # each completion is sampled with probability 1/10 (a generator seeded by the run's random prefix):
    # binomial, so within 4 standard deviations (a fixed relative band fails in a few % of runs)
    n = int(processed["O6"])
    assert abs(samples["O6"] - n / 10) <= 4 * math.sqrt(n * 0.1 * 0.9) + 1, (samples["O6"], n)
