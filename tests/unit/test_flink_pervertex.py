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
from testbed.flink.metrics import JobReading, TaskManagerReading, TaskReading, VertexState
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
    assert vx.WORDCOUNT.running(reading) == {"source": 1, "splitter": 2, "counter": 3}
    _Rest.job = {**_Rest.job, "vertices": [{**v, "status": "INITIALIZING"} if v["name"] == "split" else v
                                           for v in _Rest.job["vertices"]]}
    assert vx.WORDCOUNT.running(rest.read())["splitter"] == 0  # not running yet


# -- the mapping, pure ---------------------------------------------------------------------------------
def test_the_vertices_map_to_the_policys_operators_in_one_place():
    wc = vx.of_job("wordcount")
    assert wc.vertex_of("Source: source").name == "source"
    assert wc.vertex_of("split").name == "splitter"
    assert wc.vertex_of("count -> discard: Writer").operators == ("counter", "sink")  # chained: one vertex
    # the same vertices as the Prometheus reporter labels their tasks
    assert [wc.vertex_of(t).name for t in ("Source:_source", "split", "count____discard:_Writer")] == \
        ["source", "splitter", "counter"]
    assert wc.vertex_of("something else") is None
    assert wc.scalable == ("splitter", "counter")  # the source's rate is the schedule's, at parallelism 1
    assert wc.requirements({"splitter": 2, "counter": 3}) == {"source": 1, "splitter": 2, "counter": 3}
    with pytest.raises(KeyError, match="no parallelism for counter"):
        wc.requirements({"splitter": 2})
    with pytest.raises(KeyError, match="not a scalable vertex: source"):
        wc.requirements({"source": 2, "splitter": 1, "counter": 1})
    with pytest.raises(KeyError, match="the job has no vertex for counter"):
        vx.requirements_body({"source": "a", "splitter": "b"}, {"counter": 2})


def test_task_deltas_count_each_subtask_since_its_attempt_was_last_read():
    def reading(t: float, *tasks: TaskReading) -> JobReading:
        return JobReading(t, "RUNNING", 1, ("tm-1",), (TaskManagerReading("tm-1", None, None, None, tasks=tasks),))

    prev = reading(1.0, TaskReading("split", 0, "a", 100, 800, 50.0, 2000.0),
                   TaskReading("count -> x", 0, "b", 500, 0, 400.0, 9000.0))
    cur = reading(2.0, TaskReading("split", 0, "a", 130, 1040, 60.0, 2040.0),
                  TaskReading("count -> x", 0, "c", 90, 0, 1000.0, 450.0),
                  TaskReading("Source: source", 0, "s", 0, 130, math.nan))
    d = vx.task_deltas(vx.WORDCOUNT, vx.tasks_of(prev), cur)
    assert d["splitter"][0] == vx.SubtaskDelta(30, 240, 0.06, 0.04)
    # restarted: its records and busy time count from 0; the gauge reads 1.0 before its first update
    assert d["counter"][0] == vx.SubtaskDelta(90, 0, 1.0, 0.45)
    assert d["source"][0].records_out == 130 and math.isnan(d["source"][0].busy)
    assert math.isnan(d["source"][0].useful_s)  # not reported
    # a reading that missed the splitter: the next counts from the last one that had it
    later = reading(3.0, TaskReading("split", 0, "a", 190, 1520, 60.0, 2120.0))
    assert vx.task_deltas(vx.WORDCOUNT, vx.tasks_of(prev), later)["splitter"][0] == vx.SubtaskDelta(90, 720, 0.06, 0.12)


def test_a_vertex_target_is_clamped_and_recorded_per_subtask():
    current = {"source": 1, "splitter": 2, "counter": 2}
    targets, records = vertex_rescale(current, [ScaleTo("counter", 9, "why")], 4, vx.WORDCOUNT.scalable)
    assert targets == {"splitter": 2, "counter": 4}
    assert records == [ScaleUp("counter", "counter", "why")] * 2
    targets, records = vertex_rescale(current, [ScaleTo("splitter", 1, "less")], 4, vx.WORDCOUNT.scalable)
    assert targets == {"splitter": 1, "counter": 2} and records == [ScaleDown("splitter", "splitter-1", "splitter",
                                                                              "less")]
    assert vertex_rescale(current, [ScaleTo("counter", 2, "same")], 4, vx.WORDCOUNT.scalable) is None
    with pytest.raises(TypeError, match="per-vertex mode takes a ScaleTo"):
        vertex_rescale(current, [ScaleTo("source", 2, "no")], 4, vx.WORDCOUNT.scalable)


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
    zero, nan = np.zeros((seconds, 8)), np.full((seconds, 8), np.nan)
    source = VertexSeries("source", 1, False, False, zero, zero, nan, nan)
    return VertexSnapshot(job, (source, split, count), vx.WORDCOUNT.edges, np.ones(seconds))


def series(name: str, n: int, seconds: int, records_in: float, busy: float, out_per_in: float,
           keyed: bool) -> VertexSeries:
    """n subtasks, each taking `records_in` per second at `busy` (gauge and useful seconds alike),
    sending `out_per_in` per record on."""
    r, b = np.zeros((seconds, 8)), np.full((seconds, 8), np.nan)
    r[:, :n], b[:, :n] = records_in, busy
    return VertexSeries(name, n, True, keyed, r, r * out_per_in, b, b)


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


def test_per_vertex_mode_runs_every_job_with_a_vertex_map_and_refuses_one_without(monkeypatch):
    from testbed.flink.jobs import JOB_NAMES
    from testbed.job_config import FlinkJobConfig

    assert set(vx.MAPS) == set(JOB_NAMES)
    flink = FlinkJobConfig(parallelism="per-vertex", jobs={"wc_sine": "wordcount", "ysb_avazu": "ysb",
                                                           "tm_two_spike": "traffic"})
    assert [flink.validate_workload(w) for w in ("wc_sine", "ysb_avazu", "tm_two_spike")] == [None] * 3
    monkeypatch.delitem(vx.MAPS, "ysb")
    key, why = flink.validate_workload("ysb_avazu")
    assert key == "backend.flink.parallelism" and "vertex map of job 'ysb'" in why


# the vertices of a running job as the REST API (GET /jobs/:jobid) and the Prometheus reporter name them
YSB_VERTICES = ("Source: source", "parse -> filter -> project -> join", "count -> sink -> discard: Writer")
YSB_TASKS = ("Source:_source", "parse____filter____project____join", "count____sink____discard:_Writer")
TRAFFIC_VERTICES = ("Source: source", "parse -> filter", "speed -> enrich -> sink -> discard: Writer")
TRAFFIC_TASKS = ("Source:_source", "parse____filter", "speed____enrich____sink____discard:_Writer")


@pytest.mark.parametrize("job, rest_names, task_labels, scalable, keyed", [
    ("ysb", YSB_VERTICES, YSB_TASKS, ("parse", "count"), "count"),
    ("traffic", TRAFFIC_VERTICES, TRAFFIC_TASKS, ("parse", "speed"), "speed"),
])
def test_ysb_and_traffic_map_their_chained_vertices(job, rest_names, task_labels, scalable, keyed):
    """Each job's chains as Flink names them: the source alone at 1; the parse chain (deserialise,
    filter and, in YSB, project and join) after the rebalance, scaled, paying the per-record cost;
    the keyed windowed stage chained to the sink, scaled as one and aligned to the key groups."""
    m = vx.of_job(job)
    assert [m.vertex_of(n).name for n in rest_names] == ["source", *scalable]
    assert [m.vertex_of(n).name for n in task_labels] == ["source", *scalable]
    assert m.scalable == scalable and m.working == "parse"
    assert m.edges == (("source", scalable[0]), scalable)
    assert [v.name for v in m.vertices if v.keyed] == [keyed]
    assert m.requirements({scalable[0]: 2, scalable[1]: 3}) == {"source": 1, scalable[0]: 2, scalable[1]: 3}
    reading = JobReading(1.0, "RUNNING", 3, ("tm-1",), vertices=tuple(
        VertexState(f"id{i}", name, p, "RUNNING") for i, (name, p) in enumerate(zip(rest_names, (1, 2, 3),
                                                                                     strict=True))))
    assert m.running(reading) == {"source": 1, scalable[0]: 2, scalable[1]: 3}
    with pytest.raises(KeyError, match="no vertex map for job 'nope'"):
        vx.of_job("nope")


def test_ds2_sizes_ysbs_vertices_through_the_filters_selectivity():
    """YSB per vertex: 30 events/s arrive; two parse subtasks take 15/s each at 0.15 busy seconds a
    second (true rate 100/s each) and pass a third on (the view filter): ceil(30 / 100) = 1. The count
    stage's target input is 30 x 1/3 = 10/s; its two subtasks take 5/s each at 0.01 s (500/s each):
    ceil(10 / 500) = 1."""
    parse = series("parse", 2, 10, 15.0, 0.15, 1 / 3, False)
    count = series("count", 2, 10, 5.0, 0.01, 0.0, True)
    s = snapshot(10, 30.0, parse, count)
    s = VertexSnapshot(s.job, s.vertices, vx.YSB.edges, s.spans)
    actions = Ds2Policy(Ds2Params(policy_interval_s=10, warm_up_s=0)).decide_vertices(s)
    assert [(a.operator, a.n) for a in actions] == [("parse", 1), ("count", 1)]
    assert "target input 10.0/s over true rate 500.0/s per instance" in actions[1].reason


# -- DS2 on what Flink reports after a restart ---------------------------------------------------------
def vertex(name: str, records: List[List[float]], useful: List[List[float]], n: int, out_per_in: float = 0.0,
           scalable: bool = True) -> VertexSeries:
    """A vertex over rows x subtasks (8 slots wide) whose busy gauge reads 1.0 wherever it ran, as
    Flink's does for 5 s after an attempt starts."""
    r, u = np.zeros((len(records), 8)), np.full((len(records), 8), np.nan)
    r[:, :len(records[0])], u[:, :len(useful[0])] = records, useful
    gauge = np.where(np.isfinite(u), 1.0, np.nan)
    return VertexSeries(name, n, scalable, name == "counter", r, r * out_per_in, gauge, u)


def test_ds2_measures_the_deployment_it_decides_for_from_useful_time_over_real_seconds():
    """Four rows after a restart: restarting; the row in which it restarted (left out: part of it is
    the restart); a row a late reading stretched to 3 s; a catch-up row of 0.01 s whose reading missed
    the second counter. The window is the newest rows the deployment ran through covering 1 s: the
    last two, 3.01 s. Arrivals 90 / 3.01 s = 29.90/s; splitter 90 in, 720 out over 0.018 s useful:
    true rate 5,000/s, ceil(29.90 / 5000) = 1; counters (300 + 2) / (1.5 + 0.01) = 200/s and
    240 / 1.2 = 200/s, target input 29.90 x 720 / 90 = 239.2/s, ceil(239.2 / 200) = ceil(1.196) = 2.
    (The gauge over the last row alone would have given 2 words/s a counter: ceil(239.2 / 2) = 120.)"""
    nan = math.nan
    split = vertex("splitter", [[0.0], [10.0], [90.0], [0.0]], [[nan], [0.002], [0.018], [0.0]], 2, 8.0)
    count = vertex("counter", [[0, 0], [30, 20], [300, 240], [2, 0]],
                   [[nan, nan], [0.15, 0.1], [1.5, 1.2], [0.01, nan]], 3)
    zero, none = np.zeros((4, 8)), np.full((4, 8), np.nan)
    source = VertexSeries("source", 1, False, False, zero, zero, none, none)
    job = JobSnapshot(t=4.0, parallelism=3, max_scaleout=8, checkpoint_s=1.0, lag=0.0, seconds=np.arange(1.0, 5.0),
                      workload=np.array([30.0, 30.0, 90.0, 0.0]), throughput={}, cpu={},
                      uptime=np.array([0.0, 1.0, 2.0, 3.0]))
    s = VertexSnapshot(job, (source, split, count), vx.WORDCOUNT.edges, np.array([1.0, 1.0, 3.0, 0.01]))
    actions = Ds2Policy(Ds2Params(policy_interval_s=0.14, warm_up_s=0.28)).decide_vertices(s)
    assert [(a.operator, a.n) for a in actions] == [("splitter", 1), ("counter", 2)]
    assert actions[0].reason == "ds2: target input 29.9/s over true rate 5000.0/s per instance = 0.01 -> 1 (was 2)"
    assert actions[1].reason == "ds2: target input 239.2/s over true rate 200.0/s per instance = 1.20 -> 2 (was 3)"


def test_ds2_does_not_decide_on_a_deployment_it_has_not_seen_run_through_a_row():
    """Right after the restart only the row in which it started exists: nothing to measure yet, and
    no evaluation is counted."""
    split = vertex("splitter", [[10.0]], [[0.002]], 2, 8.0)
    count = vertex("counter", [[30, 20]], [[0.15, 0.1]], 3)
    zero, none = np.zeros((1, 8)), np.full((1, 8), np.nan)
    source = VertexSeries("source", 1, False, False, zero, zero, none, none)
    job = JobSnapshot(t=1.0, parallelism=3, max_scaleout=8, checkpoint_s=1.0, lag=0.0, seconds=np.array([1.0]),
                      workload=np.array([30.0]), throughput={}, cpu={}, uptime=np.array([1.0]))
    policy = Ds2Policy(Ds2Params(policy_interval_s=0.14, warm_up_s=0.0))
    assert policy.decide_vertices(VertexSnapshot(job, (source, split, count), vx.WORDCOUNT.edges, np.ones(1))) == []
    assert policy.state.evaluations == 0


class RecordingDs2(Ds2Policy):
    """DS2 keeping every snapshot it was given."""

    def __init__(self, params: Ds2Params):
        super().__init__(params)
        self.snapshots: List[VertexSnapshot] = []

    def decide_vertices(self, snapshot: VertexSnapshot) -> List:
        self.snapshots.append(snapshot)
        return super().decide_vertices(snapshot)


def test_ds2_on_the_fake_flinks_restarts_measures_true_rates_and_stops_flapping(tmp_path):
    """wc_sine's 5 min on the fake Flink with what made DS2 flap on a real one: busy gauges reading
    1.0 for 5 s after every restart and then a trailing average, subtasks limited to their capacity
    (a counter 200 words/s), reads that a loaded machine delays by 3 s, and readings that miss every
    subtask. Every decision measures the subtasks' true rates exactly (counter 1 / 5 ms = 200 words/s,
    splitter 1 / 0.2 ms = 5,000 sentences/s), so DS2 follows the load: 4 rescales. The gauge over the
    same rows, what DS2 was handed before, gives a counter 2-3 words/s in the row a subtask started."""
    def setup(fake: FakeFlink) -> None:
        fake.capacity = True
        fake.slow_reads = [(1000.0 + t, 1001.0 + t, 3.0) for t in range(30, 300, 40)]
        fake.tasks_missing = [(1000.0 + t, 1001.0 + t) for t in range(50, 300, 60)]

    cfg = compose_config(*PER_VERTEX, f"out={tmp_path}", "duration_min=360")
    policy = RecordingDs2(policy_for(config_for(cfg, plan_runs(cfg)[0])).params)
    run, result, fake = vertex_run(tmp_path, policy, "duration_min=360", setup=setup)
    assert result.incomplete is None and result.details["accounting"]["drained"]
    actions = pd.DataFrame(result.tables["actions"])
    decided = actions[actions.operator.isin(vx.WORDCOUNT.scalable)].drop_duplicates(["t_s", "operator"])
    rates = {"splitter": "true rate 5000.0/s", "counter": "true rate 200.0/s"}
    assert all(rates[op] in why for op, why in zip(decided.operator, decided.reason, strict=True))
    assert [(op, int(why.split("-> ")[1].split()[0])) for op, why in zip(decided.operator, decided.reason,
                                                                        strict=True)] == \
        [("splitter", 1), ("counter", 1), ("counter", 2), ("counter", 1)]
    assert len(result.tables["rescales"]["t_s"]) == 4
    # the input is the one that made it flap: gauge-based rates of the last row, where a subtask ran
    gauge_rates = [float(np.nansum(c.records_in[-1]) / np.nansum(c.busy[-1])) for c in
                   (s.vertex("counter") for s in policy.snapshots) if np.nansum(c.busy[-1]) > 0]
    assert min(gauge_rates) < 5 and max(s.spans.max() for s in policy.snapshots) > 3
    assert any(np.isnan(s.vertex("counter").useful[-1]).all() and s.job.uptime[-1] > 1 for s in policy.snapshots)
