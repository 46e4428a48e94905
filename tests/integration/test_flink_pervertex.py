"""Per-vertex parallelism on a real Apache Flink (`backend.flink.parallelism=per-vertex`,
testbed/live/flink_vertex_engine.py, docs/flink.md#per-vertex-parallelism): the adaptive scheduler
with each vertex's resource requirements set through the REST API. One short run of the
daedalus_flink evaluation per job (WordCount: the first 24 min of wc_sine in 20 s; Traffic
Monitoring, whose chained vertices are named by the vertex map of its own: the first 12 min of
tm_two_spike in 10 s) starting with both scalable vertices at 2 on two TaskManagers; at its first
decision the policy asks for both at 1. Flink must run each vertex at what was asked (read back from
the REST API), every subtask must report its accumulated busy time (DS2's useful time), the
TaskManager left without a task must be stopped, every record the schedule made due must be counted
exactly once, and no Flink process may outlive the run. No TaskManager starts after the first two,
so that each run costs one cluster's start (about a minute on CI's loaded machine)."""
from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np
import pandas as pd
import pytest

from testbed.experiment import build_pattern, config_for, plan_runs
from testbed.live.flink_job import FlinkJobRun
from testbed.model import ScaleTo
from testbed.policies.contract import Policy
from testbed.policies.job_inputs import VertexSnapshot

from .test_flink_engine import flink_installed, wait_gone  # noqa: F401 (a fixture)
from .test_live_run import config

pytestmark = [pytest.mark.integration, pytest.mark.live, pytest.mark.slow, pytest.mark.usefixtures("cpu_hog")]

RUN = ("evaluation=daedalus_flink", "evaluation.only=[ds2]", "backend.flink.parallelism=per-vertex",
       "job.initial_parallelism=2", "reps=1", "summary=false")


class Narrow(Policy):
    """Both scalable vertices from 2 to 1 at the first decision; keeps what it saw per vertex, and
    the useful seconds each subtask reported in the newest row."""

    name = "narrow"
    interval_s = 1.0

    def __init__(self) -> None:
        self.asked = False
        self.seen: List[Dict[str, int]] = []
        self.useful: List[float] = []

    def initial_parallelism(self, max_scaleout: int) -> Optional[int]:
        return 2

    def decide_vertices(self, snapshot: VertexSnapshot) -> List:
        self.seen.append(snapshot.parallelism())
        self.useful += [float(u) for v in snapshot.vertices if v.scalable for u in v.useful[-1] if np.isfinite(u)]
        if self.asked:
            return []
        self.asked = True
        return [ScaleTo(v.name, 1, f"narrow: {v.name}") for v in snapshot.vertices if v.scalable]


@pytest.mark.parametrize("workload, minutes, scalable", [("wc_sine", 24, ("splitter", "counter")),
                                                         ("tm_two_spike", 12, ("parse", "speed"))])
def test_a_per_vertex_rescale_on_flink_counts_every_record_once(tmp_path, flink_installed,  # noqa: F811
                                                                 workload, minutes, scalable):
    cfg = config(*RUN, f"pattern={workload}", f"duration_min={minutes}", f"out={tmp_path}")
    [spec] = plan_runs(cfg)
    run_cfg = config_for(cfg, spec)
    policy = Narrow()
    run = FlinkJobRun(run_cfg, policy, build_pattern(run_cfg.pattern, cfg.seed), "pervertex/1", tmp_path)
    result = run.run()
    mode = result.details["parallelism"]
    print(mode["timeline"], result.details["accounting"], pd.DataFrame(result.tables["rescales"]).to_string())
    assert result.incomplete is None, result.incomplete
    assert (mode["mode"], mode["scheduler"]) == ("per-vertex", "adaptive")
    two, one = dict.fromkeys(scalable, 2), dict.fromkeys(scalable, 1)
    assert mode["timeline"][0]["running"] == two
    assert mode["timeline"][-1]["running"] == mode["timeline"][-1]["required"] == one
    assert policy.seen[0] == {"source": 1, **two}
    assert policy.seen[-1] == {"source": 1, **one}  # read back from Flink
    assert policy.useful and sum(policy.useful) > 0  # busy seconds between readings, from every subtask
    rescales = pd.DataFrame(result.tables["rescales"])
    assert list(rescales[["from_n", "to_n"]].iloc[0]) == [2, 1] and rescales.downtime_s.iloc[0] > 0
    assert pd.DataFrame(result.tables["instances"]).hosts.iloc[-1] == 1  # the idle TaskManager was stopped
    acc = result.details["accounting"]
    assert acc["drained"] and acc["scheduled"] > 0 and acc["counted"] == acc["scheduled"] == acc["emitted"], acc
    pids = [p["pid"] for p in result.details["flink"]["processes"].values()]
    assert pids and wait_gone(pids, 30.0) == [], pids
