"""Per-vertex parallelism on Flink (testbed/live/flink_vertex_engine.py, testbed/flink/vertices.py,
docs/flink.md#per-vertex-parallelism): the REST call's body against a local HTTP server standing in
for the JobManager's REST API, the vertices read back, and whole runs against the fake Flink
(tests/unit/flink_fakes.py) whose vertices run at what their requirements and the slots allow. The
same on a real Flink: tests/integration/test_flink_pervertex.py."""
from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Dict, List, Optional

import numpy as np
import pandas as pd
import pytest

from testbed.config import ConfigError
from testbed.experiment import build_pattern, config_for, plan_runs, policy_for
from testbed.flink import vertices as vx
from testbed.flink.cluster import FlinkCluster, FlinkClusterError
from testbed.flink.metrics import JobReading, TaskManagerReading, TaskReading
from testbed.flink.schedule import from_rates
from testbed.flink.settings import FlinkSettings
from testbed.live.flink_job import FlinkJobRun
from testbed.model import ScaleDown, ScaleTo, ScaleUp
from testbed.policies.contract import Policy, decides_per_vertex
from testbed.policies.ds2 import Ds2Params, Ds2Policy
from testbed.policies.flink_autoscaler import FlinkAutoscalerParams, FlinkAutoscalerPolicy
from testbed.policies.job_inputs import JobSnapshot, VertexSeries, VertexSnapshot
from testbed.policies.scaling import vertex_rescale
from tests.conftest import compose_config

from .flink_fakes import IDS, FakeClock, FakeFlink

PER_VERTEX = ("evaluation=daedalus_flink", "evaluation.only=[ds2]", "backend.flink.parallelism=per-vertex",
              "reps=1", "duration_min=72")


# -- the REST call ------------------------------------------------------------------------------------
class _Rest(BaseHTTPRequestHandler):
    job: dict = {}
    puts: List[tuple] = []
    status = 200

    def do_GET(self) -> None:  # noqa: N802 (the handler's name)
        body = {"taskmanagers": [{"id": "tm-1"}]} if self.path == "/taskmanagers" else self.job
        self._answer(200, body)

    def do_PUT(self) -> None:  # noqa: N802
        length = int(self.headers["Content-Length"])
        _Rest.puts.append((self.path, self.headers["Content-Type"], json.loads(self.rfile.read(length))))
        self._answer(self.status, {} if self.status == 200 else {"errors": ["refused"]})

    def _answer(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def rest(tmp_path):
    """A FlinkCluster whose REST port is a local server answering as a JobManager would."""
    _Rest.puts, _Rest.status = [], 200
    cluster = FlinkCluster(FlinkSettings(scheduler="adaptive"), from_rates([1.0]), tmp_path)
    _Rest.job = {"jid": cluster.job_id, "state": "RUNNING", "vertices": [
        {"id": "cbc357ccb763df2852fee8c4fc7d55f2", "name": "Source: source", "parallelism": 1, "status": "RUNNING"},
        {"id": "90bea66de1c231edf33913ecd54406c1", "name": "split", "parallelism": 2, "status": "RUNNING"},
        {"id": "6cdc5bb954874d922eaee11a8e7ca5be", "name": "count -> discard: Writer", "parallelism": 3,
         "status": "RUNNING"}]}
    server = HTTPServer(("127.0.0.1", 0), _Rest)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    cluster.rest_port = server.server_address[1]
    yield cluster
    server.shutdown()
    server.server_close()


def test_the_requirements_are_put_per_vertex_id_with_the_target_as_upper_bound(rest):
    rest.require({"source": 1, "splitter": 1, "counter": 4})
    [(path, content_type, body)] = _Rest.puts
    assert path == f"/jobs/{rest.job_id}/resource-requirements" and content_type == "application/json"
    assert body == {"cbc357ccb763df2852fee8c4fc7d55f2": {"parallelism": {"lowerBound": 1, "upperBound": 1}},
                    "90bea66de1c231edf33913ecd54406c1": {"parallelism": {"lowerBound": 1, "upperBound": 1}},
                    "6cdc5bb954874d922eaee11a8e7ca5be": {"parallelism": {"lowerBound": 1, "upperBound": 4}}}


def test_a_refused_requirement_fails_naming_what_flink_said(rest):
    _Rest.status = 400
    with pytest.raises(FlinkClusterError, match=r"refused the resource requirements .*HTTP 400 .*refused"):
        rest.require({"source": 1, "splitter": 1, "counter": 200})


def test_what_each_vertex_runs_at_is_read_back_from_the_job(rest):
    reading = rest.read()
    assert reading.parallelism == 3  # the counting vertex, as in reactive mode
    assert vx.running(reading) == {"source": 1, "splitter": 2, "counter": 3}
    _Rest.job = {**_Rest.job, "vertices": [{**v, "status": "INITIALIZING"} if v["name"] == "split" else v
                                           for v in _Rest.job["vertices"]]}
    assert vx.running(rest.read())["splitter"] == 0  # not running yet


# -- the mapping, pure ---------------------------------------------------------------------------------
def test_the_vertices_map_to_the_policys_operators_in_one_place():
    assert vx.vertex_of("Source: source").name == "source"
    assert vx.vertex_of("split").name == "splitter"
    assert vx.vertex_of("count -> discard: Writer").operators == ("counter", "sink")  # chained: one vertex
    # the same vertices as the Prometheus reporter labels their tasks
    assert [vx.vertex_of(t).name for t in ("Source:_source", "split", "count____discard:_Writer")] == \
        ["source", "splitter", "counter"]
    assert vx.vertex_of("something else") is None
    assert vx.SCALABLE == ("splitter", "counter")  # the source's rate is the schedule's, at parallelism 1
    assert vx.requirements({"splitter": 2, "counter": 3}) == {"source": 1, "splitter": 2, "counter": 3}
    with pytest.raises(KeyError, match="no parallelism for counter"):
        vx.requirements({"splitter": 2})
    with pytest.raises(KeyError, match="not a scalable vertex: source"):
        vx.requirements({"source": 2, "splitter": 1, "counter": 1})
    with pytest.raises(KeyError, match="the job has no vertex for counter"):
        vx.requirements_body({"source": "a", "splitter": "b"}, {"counter": 2})


def test_task_deltas_count_each_subtask_and_a_new_attempt_from_zero():
    def reading(t: float, *tasks: TaskReading) -> JobReading:
        return JobReading(t, "RUNNING", 1, ("tm-1",), (TaskManagerReading("tm-1", None, None, None, tasks=tasks),))

    prev = reading(1.0, TaskReading("split", 0, "a", 100, 800, 50.0), TaskReading("count -> x", 0, "b", 500, 0, 400.0))
    cur = reading(2.0, TaskReading("split", 0, "a", 130, 1040, 60.0), TaskReading("count -> x", 0, "c", 90, 0, 450.0),
                  TaskReading("Source: source", 0, "s", 0, 130, math.nan))
    d = vx.task_deltas(prev, cur)
    assert d["splitter"][0] == vx.SubtaskDelta(30, 240, 0.06)
    assert d["counter"][0] == vx.SubtaskDelta(90, 0, 0.45)  # restarted: counts from 0
    assert d["source"][0].records_out == 130 and math.isnan(d["source"][0].busy)


def test_a_vertex_target_is_clamped_and_recorded_per_subtask():
    current = {"source": 1, "splitter": 2, "counter": 2}
    targets, records = vertex_rescale(current, [ScaleTo("counter", 9, "why")], 4, vx.SCALABLE)
    assert targets == {"splitter": 2, "counter": 4}
    assert records == [ScaleUp("counter", "counter", "why")] * 2
    targets, records = vertex_rescale(current, [ScaleTo("splitter", 1, "less")], 4, vx.SCALABLE)
    assert targets == {"splitter": 1, "counter": 2} and records == [ScaleDown("splitter", "splitter-1", "splitter",
                                                                              "less")]
    assert vertex_rescale(current, [ScaleTo("counter", 2, "same")], 4, vx.SCALABLE) is None
    with pytest.raises(TypeError, match="per-vertex mode takes a ScaleTo"):
        vertex_rescale(current, [ScaleTo("source", 2, "no")], 4, vx.SCALABLE)


# -- the configuration ----------------------------------------------------------------------------------
def test_a_policy_that_decides_one_parallelism_is_refused_in_per_vertex_mode():
    assert decides_per_vertex(Ds2Policy) and decides_per_vertex(FlinkAutoscalerPolicy)
    assert not decides_per_vertex(Policy)
    with pytest.raises(ConfigError) as err:
        compose_config("evaluation=daedalus_flink", "backend.flink.parallelism=per-vertex")
    assert err.value.key == "backend.flink.parallelism"
    assert "configuration 'daedalus' (policy daedalus) decides one" in str(err.value)
    compose_config("evaluation=daedalus_flink", "backend.flink.parallelism=per-vertex",
                   "evaluation.only=[ds2,flink_autoscaler]")
    with pytest.raises(ConfigError) as err:
        compose_config("evaluation=daedalus_flink", "backend.flink.parallelism=vertex")
    assert err.value.key == "backend.flink.parallelism"
    with pytest.raises(ConfigError) as err:
        compose_config("evaluation=daedalus_flink", "+backend.flink.settings.scheduler=adaptive")
    assert err.value.key == "backend.flink.settings.scheduler"


# -- whole runs on the fake Flink -------------------------------------------------------------------------
class VertexScripted(Policy):
    """Starts at `n0` and, at its first decision, asks for `targets` per vertex; keeps what it saw."""

    name = "vertex-scripted"
    interval_s = 1.0

    def __init__(self, n0: int, targets: Dict[str, int]):
        self.n0, self.targets, self.seen = n0, dict(targets), []  # type: int, Dict[str, int], List[Dict[str, int]]

    def initial_parallelism(self, max_scaleout: int) -> Optional[int]:
        return self.n0

    def decide_vertices(self, snapshot: VertexSnapshot) -> List:
        self.seen.append(snapshot.parallelism())
        targets, self.targets = self.targets, {}
        return [ScaleTo(v, n, f"scripted {v}") for v, n in targets.items()]


def vertex_run(tmp_path, policy: Policy, *overrides: str, setup=lambda fake: None):
    cfg = compose_config(*PER_VERTEX, f"out={tmp_path}", *overrides)
    [spec] = plan_runs(cfg)
    run_cfg = config_for(cfg, spec)
    clock, fakes = FakeClock(), []

    def engine(settings: FlinkSettings, schedule):
        fake = FakeFlink(clock, schedule, heartbeat_s=settings.heartbeat_timeout_s,
                         adaptive=settings.scheduler == "adaptive")
        setup(fake)
        fakes.append(fake)
        return fake

    run = FlinkJobRun(run_cfg, policy or policy_for(run_cfg), build_pattern(run_cfg.pattern, cfg.seed),
                      "fake/run/1", engine=engine, clock=clock)
    return run, run.run(), fakes[0]


def test_a_per_vertex_scale_out_sets_the_requirements_and_starts_the_slots_first(tmp_path):
    run, result, fake = vertex_run(tmp_path, VertexScripted(2, {"splitter": 1, "counter": 3}))
    assert result.incomplete is None, result.incomplete
    assert run.settings.scheduler == "adaptive"
    assert fake.bodies == [{IDS["source"]: {"parallelism": {"lowerBound": 1, "upperBound": 1}},
                            IDS["splitter"]: {"parallelism": {"lowerBound": 1, "upperBound": 1}},
                            IDS["counter"]: {"parallelism": {"lowerBound": 1, "upperBound": 3}}}]
    rescales = pd.DataFrame(result.tables["rescales"])
    assert list(rescales[["from_n", "to_n"]].iloc[0]) == [2, 3] and rescales.downtime_s.iloc[0] > 0
    assert rescales.capacity_after.iloc[0] == 3 * run.flink.tm_rate  # the counter's subtasks carry it
    actions = pd.DataFrame(result.tables["actions"])
    scaled = actions[actions.action.isin(["scale_up", "scale_down"])]
    assert sorted(zip(scaled.operator, scaled.action, strict=True)) == [("counter", "scale_up"),
                                                                   ("splitter", "scale_down")]
    mode = result.details["parallelism"]
    assert (mode["mode"], mode["scheduler"]) == ("per-vertex", "adaptive")
    assert mode["vertices"]["counter"]["operators"] == ["counter", "sink"]
    assert mode["timeline"][-1]["running"] == mode["timeline"][-1]["required"] == {"splitter": 1, "counter": 3}
    acc = result.details["accounting"]
    assert acc["drained"] and acc["counted"] == acc["scheduled"]


def test_a_per_vertex_scale_in_stops_the_taskmanagers_left_idle(tmp_path):
    run, result, fake = vertex_run(tmp_path, VertexScripted(3, {"splitter": 1, "counter": 1}))
    assert result.incomplete is None, result.incomplete
    assert [name for name, _ in fake.removed] == ["tm-3", "tm-2"]  # once the job ran at 1, newest first
    instances = pd.DataFrame(result.tables["instances"])
    assert instances.hosts.iloc[-1] == 1 and instances.instances.iloc[-1] == 1
    assert not math.isnan(result.tables["rescales"]["downtime_s"][0])


def test_a_requirement_flink_did_not_meet_is_given_up_and_the_policy_sees_what_runs(tmp_path):
    def setup(fake: FakeFlink) -> None:
        fake.hangs.add(3)  # the third slot never comes: the counter cannot run at 3

    policy = VertexScripted(2, {"counter": 3})
    run, result, fake = vertex_run(tmp_path, policy, "+backend.flink.settings.heartbeat_timeout_s=5",
                                   "+backend.flink.settings.heartbeat_interval_s=1", setup=setup)
    [given_up] = result.details["given_up"]
    assert "did not run at 3 TaskManager(s)" in given_up["reason"]
    timeline = result.details["parallelism"]["timeline"]
    assert any(row["required"]["counter"] == 3 and row["running"]["counter"] == 2 for row in timeline)
    assert all(seen["counter"] == 2 for seen in policy.seen[1:4])  # what runs, not what was asked


# -- the policies per vertex -----------------------------------------------------------------------------
def snapshot(seconds: int, arrivals: float, split: VertexSeries, count: VertexSeries, lag: float = 0.0,
             uptime0: float = 100.0) -> VertexSnapshot:
    t = np.arange(1, seconds + 1, dtype=float)
    job = JobSnapshot(t=float(seconds), parallelism=max(split.parallelism, count.parallelism), max_scaleout=8,
                      checkpoint_s=1.0, lag=lag, seconds=t, workload=np.full(seconds, arrivals),
                      throughput={}, cpu={}, uptime=uptime0 + t)
    zero = np.zeros((seconds, 8))
    source = VertexSeries("source", 1, False, False, zero, zero, np.full((seconds, 8), np.nan))
    return VertexSnapshot(job, (source, split, count), vx.EDGES)


def series(name: str, n: int, seconds: int, records_in: float, busy: float, out_per_in: float,
           keyed: bool) -> VertexSeries:
    """n subtasks, each taking `records_in` per second at `busy`, sending `out_per_in` per record on."""
    r, b = np.zeros((seconds, 8)), np.full((seconds, 8), np.nan)
    r[:, :n], b[:, :n] = records_in, busy
    return VertexSeries(name, n, True, keyed, r, r * out_per_in, b)


def test_ds2_sizes_each_vertex_from_its_own_true_rate():
    """40 sentences/s arrive; the two splitters each split 20/s at 1 % busy (true rate 2,000/s each),
    the two counters each count 80 words/s at 80 % busy (true rate 100 words/s each). Target input of
    the counter: 40 x 8 = 320 words/s, so ceil(320 / 100) = 4 counters; ceil(40 / 2000) = 1 splitter."""
    s = snapshot(30, 40.0, series("splitter", 2, 30, 20.0, 0.01, 8.0, False),
                 series("counter", 2, 30, 80.0, 0.8, 0.0, True))
    policy = Ds2Policy(Ds2Params(policy_interval_s=10, warm_up_s=0))
    actions = policy.decide_vertices(s)
    assert {(a.operator, a.n) for a in actions} == {("splitter", 1), ("counter", 4)}
    counter = next(a for a in actions if a.operator == "counter")
    assert "target input 320.0/s over true rate 100.0/s per instance = 3.20 -> 4 (was 2)" in counter.reason


def test_the_flink_autoscaler_scales_the_counter_and_aligns_it_to_the_key_groups():
    """Counter: target 40 x 8 = 320 words/s, true rate 2 x 80 / 0.8 = 200 words/s over two subtasks;
    capacity at 70 % = 320 / 0.7 = 457 -> factor 2.29, ceil(2.29 x 2) = 5; aligned (BALANCED) to the
    first count from 5 on that lowers the key groups per subtask below ceil(128 / 5) = 26: 6 (22 each).
    Splitter: 40/s at 1 % busy, a true rate of 4,000/s, above the scale-down threshold (the capacity at
    40 %: 100/s), so it goes down by at most 60 %: ceil(0.4 x 2) = 1 (a scale-down interval of 0)."""
    params = FlinkAutoscalerParams(stabilization_s=0, metrics_window_s=10, scale_down_interval_s=0,
                                   restart_time_s=0, catch_up_s=100)
    policy = FlinkAutoscalerPolicy(params)
    s = snapshot(12, 40.0, series("splitter", 2, 12, 20.0, 0.01, 8.0, False),
                 series("counter", 2, 12, 80.0, 0.8, 0.0, True))
    actions = policy.decide_vertices(s)
    assert {(a.operator, a.n) for a in actions} == {("splitter", 1), ("counter", 6)}
    assert all(a.reason.startswith(f"flink-autoscaler: {a.operator} parallelism 2 -> ") for a in actions)


def test_per_vertex_mode_is_refused_for_a_job_whose_vertices_are_not_mapped():
    from testbed.job_config import FlinkJobConfig

    flink = FlinkJobConfig(parallelism="per-vertex", jobs={"wc_sine": "wordcount", "ysb_avazu": "ysb"})
    assert flink.validate_workload("wc_sine") is None
    key, why = flink.validate_workload("ysb_avazu")
    assert key == "backend.flink.parallelism" and "ysb" in why
