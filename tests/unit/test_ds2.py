"""DS2 (testbed/policies/ds2.py, ds2_core.py) on hand-computed cases: the worked examples of the
authors' controller (one source, two sources, three observation windows), topological propagation,
scale-up and scale-down, warm-up, activation, job mode and the parameters."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from testbed.model import ScaleDown, ScaleTo, ScaleUp
from testbed.policies.ds2 import Ds2Params, Ds2Policy, job_window, operator_windows, source_rates
from testbed.policies.ds2_core import InstanceWindow, VertexWindow, ceil, optimal_parallelism
from testbed.policies.job_inputs import JOB_OPERATOR, JobSnapshot
from tests.unit.policy_fixtures import World


def vertex(name, true_processing, true_output, downstream=None, parallelism=1):
    """An operator of one instance whose useful time is 1 s: its rates are its counts."""
    pushed = {downstream: true_output} if downstream else {}
    return VertexWindow(name, parallelism, (InstanceWindow(true_processing, 1.0),), pushed)


def chain(src_rates, op1, op2):
    """Source(s) -> Op1 -> Op2, each operator at (true processing rate, true output rate)."""
    vertices = [vertex("Op1", *op1, downstream="Op2"), vertex("Op2", *op2)]
    edges = [(s, "Op1") for s in src_rates] + [("Op1", "Op2")]
    sources = {(s, "Op1"): r for s, r in src_rates.items()}
    return {k: e.n for k, e in optimal_parallelism(vertices, edges, sources).items()}


# -- the worked examples (strymon-system/ds2, controller/tests/scaling_policy_test.rs) -----------------

@pytest.mark.parametrize("source, op1, op2, expected", [
    # source at 100/s; Op1 sustains 50/s per instance and emits 8 records per record (400/50):
    # Op1 = ceil(100 / 50) = 2; Op2 receives 100 * 400/50 = 800/s at 100/s per instance: 8
    (100.0, (50.0, 400.0), (100.0, 200.0), {"Op1": 2, "Op2": 8}),
    # source at 200/s: Op1 = ceil(200 / 40) = 5; Op2 = ceil(200 * 700/40 / 99) = ceil(35.35) = 36
    (200.0, (40.0, 700.0), (99.0, 200.0), {"Op1": 5, "Op2": 36}),
    # Op1 = ceil(200 / 10) = 20; Op2 = ceil(200 * 700/10 / 201) = ceil(69.65) = 70
    (200.0, (10.0, 700.0), (201.0, 200.0), {"Op1": 20, "Op2": 70}),
])
def test_the_one_source_examples(source, op1, op2, expected):
    assert chain({"Source": source}, op1, op2) == expected


def test_the_two_source_example_sums_the_upstreams():
    # two sources at 100/s each: Op1 = ceil(200 / 50) = 4; Op2 = ceil(200 * 400/50 / 100) = 16
    assert chain({"Source1": 100.0, "Source2": 100.0}, (50.0, 400.0), (100.0, 200.0)) == {"Op1": 4, "Op2": 16}


# -- the model -----------------------------------------------------------------------------------------

def test_true_rates_divide_by_useful_time_and_sum_over_instances():
    # two instances: 30 records in 0.5 s useful (60/s) and 20 in 0.25 s (80/s): 140/s together,
    # 70/s per instance; 100 pushed of 50 processed: true output 280/s
    v = VertexWindow("a", 2, (InstanceWindow(30, 0.5), InstanceWindow(20, 0.25)), {"b": 100}, 1.0)
    assert v.true_processing_rate() == pytest.approx(140.0)
    assert v.rate_per_instance() == pytest.approx(70.0)
    assert v.true_output_rate("b") == pytest.approx(280.0)
    # an idle instance (no useful time) is not measured: it tells nothing of the rate
    idle = dataclasses.replace(v, instances=v.instances + (InstanceWindow(0, 0.0),), parallelism=3)
    assert idle.rate_per_instance() == pytest.approx(70.0)


def test_an_upstreams_new_parallelism_changes_its_downstreams_input():
    # A is saturated at 2 instances of 10/s (observed output 20/s, selectivity 1); the source offers
    # 60/s, so A goes to 6 and B, which saw 20/s, must take 60/s: at 15/s per instance, 4 (not 2)
    vertices = [VertexWindow("A", 2, (InstanceWindow(10, 1.0), InstanceWindow(10, 1.0)), {"B": 20}),
                VertexWindow("B", 2, (InstanceWindow(10, 10 / 15), InstanceWindow(10, 10 / 15)))]
    est = optimal_parallelism(vertices, [("src", "A"), ("A", "B")], {("src", "A"): 60.0})
    assert (est["A"].n, est["B"].n) == (6, 4)
    assert est["B"].target_input == pytest.approx(60.0)


def test_an_unmeasured_upstream_passes_on_what_it_pushed():
    vertices = [VertexWindow("A", 1, (), {"B": 30}, 10.0), vertex("B", 2.0, 0.0)]
    est = optimal_parallelism(vertices, [("src", "A"), ("A", "B")], {("src", "A"): 60.0})
    assert est["A"].n is None and est["B"].n == 2  # 30 items in 10 s: 3/s at 2/s per instance


def test_over_provisioning_and_bounds():
    vertices = [vertex("A", 10.0, 0.0)]
    edges, sources = [("s", "A")], {("s", "A"): 40.0}
    assert optimal_parallelism(vertices, edges, sources)["A"].n == 4
    assert optimal_parallelism(vertices, edges, sources, over_provision=0.5)["A"].n == 6
    assert optimal_parallelism(vertices, edges, sources, bounds=(1, 3))["A"].n == 3
    assert optimal_parallelism(vertices, edges, {("s", "A"): 0.0}, bounds=(2, 0))["A"].n == 2
    assert ceil(4.0000000001) == 4 and ceil(4.01) == 5


# -- operator mode -------------------------------------------------------------------------------------

def oee_world(busy, processed, sent, t=100.0):
    """src -> A -> B, A with two instances on h1, B with two on h2; `busy`/`processed` per instance
    (a1, a2, b1, b2) over a 10 s interval; `sent`: items along (src, A) and (A, B)."""
    w = World(t=t).op("A", cpu=256, memory=256).op("B", cpu=256, memory=256)
    ids = w.host("h1", "A", "A") + w.host("h2", "B", "B")
    snap = w.snapshot()
    return dataclasses.replace(
        snap, monitoring_s=10.0, edges=(("src", "A"), ("A", "B")),
        edge_items={("src", "A"): sent[0], ("A", "B"): sent[1]},
        instance_stats={i: (p, u) for i, p, u in zip(ids, processed, busy, strict=True)})


def test_operator_mode_scales_up_and_down_in_one_decision():
    # A: 2 x 50 items in 10 s at busy 1.0: 5/s per instance; the source sent 200 items: 20/s -> 4.
    # A pushed 100 of 100: B takes 20/s; B did 2 x 50 items at busy 0.1 (50/s per instance) -> 1
    snap = oee_world(busy=(1.0, 1.0, 0.1, 0.1), processed=(50, 50, 50, 50), sent=(200, 100))
    assert source_rates(snap) == {("src", "A"): 20.0}
    assert [v.rate_per_instance() for v in operator_windows(snap)] == [pytest.approx(5.0), pytest.approx(50.0)]
    policy = Ds2Policy(Ds2Params(warm_up_s=0.0))
    actions = policy.decide(snap)
    ups = [a for a in actions if isinstance(a, ScaleUp)]
    downs = [a for a in actions if isinstance(a, ScaleDown)]
    assert [a.operator for a in ups] == ["A", "A"] and [a.operator for a in downs] == ["B"]
    assert "ds2: target input 20.0/s over true rate 5.0/s per instance = 4.00 -> 4 (was 2)" in ups[0].reason
    assert policy.state.last_rescale == 100.0


def test_warm_up_suppresses_decisions_after_a_rescale_and_at_the_start():
    policy = Ds2Policy(Ds2Params(policy_interval_s=10.0, warm_up_s=20.0))
    over = dict(busy=(1.0, 1.0, 0.1, 0.1), processed=(50, 50, 50, 50), sent=(200, 100))
    assert policy.decide(oee_world(t=10.0, **over)) == []  # the initial deployment warms up too
    assert policy.decide(oee_world(t=20.0, **over))  # rescales
    assert policy.decide(oee_world(t=30.0, **over)) == []  # in warm-up: ignored
    assert policy.state.last_evaluation == 20.0
    assert policy.decide(oee_world(t=40.0, **over))  # warm-up over: decides again


def test_decisions_keep_the_policy_interval_and_wait_for_activation():
    policy = Ds2Policy(Ds2Params(policy_interval_s=60.0, warm_up_s=0.0, activation=2))
    over = dict(busy=(1.0, 1.0, 0.1, 0.1), processed=(50, 50, 50, 50), sent=(200, 100))
    assert policy.decide(oee_world(t=60.0, **over)) == []  # first evaluation: not yet active
    assert policy.decide(oee_world(t=90.0, **over)) == []  # within the interval: no evaluation
    assert policy.decide(oee_world(t=120.0, **over))  # second evaluation: acts


def test_a_deployment_at_its_optimum_stays():
    # A at 2 x 5/s gets 10/s: it stays at 2; B at 2 x 50/s gets 10/s and needs 1: only B changes
    policy = Ds2Policy(Ds2Params(warm_up_s=0.0, policy_interval_s=10.0))
    snap = oee_world(busy=(1.0, 1.0, 0.1, 0.1), processed=(50, 50, 50, 50), sent=(100, 100))
    assert {a.operator for a in policy.decide(snap)} == {"B"}


# -- job mode ------------------------------------------------------------------------------------------

def job(t, parallelism, workload, thr, cpu, k=10):
    return JobSnapshot(t=t, parallelism=parallelism, max_scaleout=18, checkpoint_s=10.0, lag=0.0,
                       seconds=np.arange(t - k + 1, t + 1, dtype=float), workload=np.full(k, workload),
                       throughput={f"w{i}": np.full(k, thr) for i in range(parallelism)},
                       cpu={f"w{i}": np.full(k, cpu) for i in range(parallelism)}, uptime=np.full(k, t))


def test_job_mode_is_one_vertex_fed_by_the_arrivals():
    # 2 workers, each 400 items/s at 50 % CPU: 800/s per worker when busy; 3000/s arrive -> 4
    s = job(100.0, 2, 3000.0, 400.0, 0.5)
    window, rate = job_window(s, 10.0)
    assert rate == 3000.0 and window.rate_per_instance() == pytest.approx(800.0)
    policy = Ds2Policy(Ds2Params(warm_up_s=0.0))
    [target] = policy.decide_job(s)
    assert target == ScaleTo(JOB_OPERATOR, 4, target.reason) and "3000.0/s over true rate 800.0/s" in target.reason
    assert policy.decide_job(job(105.0, 4, 3000.0, 750.0, 0.9375)) == []  # within the interval
    # scale-down: 4 workers at 25 % CPU with 200/s each; 800/s arrive at 800/s per worker -> 1
    assert policy.decide_job(job(130.0, 4, 800.0, 200.0, 0.25))[0].n == 1


def test_job_mode_warms_up_from_when_the_job_runs_again():
    """A job rescale restarts the job: its warm-up counts from the restart's end (the uptime), not
    from the decision, so the restart's seconds never feed the next decision."""
    policy = Ds2Policy(Ds2Params(policy_interval_s=10.0, warm_up_s=20.0))
    assert policy.decide_job(job(100.0, 2, 3000.0, 400.0, 0.5))[0].n == 4  # rescaled at t=100
    restarting = dataclasses.replace(job(130.0, 4, 3000.0, 750.0, 0.9375), uptime=np.full(10, 0.0))
    assert policy.decide_job(restarting) == []  # 30 s after the decision, but the job is not up
    up_5s = dataclasses.replace(job(140.0, 4, 6000.0, 750.0, 0.9375), uptime=np.arange(-4.0, 6.0).clip(0))
    assert policy.decide_job(up_5s) == []  # up for 5 s of the 20 s warm-up
    up_20s = dataclasses.replace(job(155.0, 4, 6000.0, 750.0, 0.9375), uptime=np.arange(11.0, 21.0))
    assert policy.decide_job(up_20s)[0].n == 8  # warmed up: 6000/s over 800/s per worker


def test_job_mode_ignores_seconds_a_worker_was_not_running_and_caps_at_max_scaleout():
    s = job(100.0, 1, 100_000.0, 100.0, 0.5)
    cpu = s.cpu["w0"].copy()
    cpu[:5] = np.nan  # restarting: its zeros of throughput are no measurement
    s = dataclasses.replace(s, cpu={"w0": cpu}, throughput={"w0": np.where(np.isfinite(cpu), 100.0, 0.0)})
    window, _ = job_window(s, 10.0)
    assert window.rate_per_instance() == pytest.approx(200.0)
    assert Ds2Policy(Ds2Params(warm_up_s=0.0)).decide_job(s)[0].n == 18


# -- parameters ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("field, value", [
    ("policy_interval_s", 0.0), ("warm_up_s", -1.0), ("activation", 0), ("over_provision", -0.1),
    ("min_parallelism", 0), ("max_parallelism", -1),
])
def test_invalid_parameters_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"^{field}: "):
        dataclasses.replace(Ds2Params(), **{field: value}).validate()


def test_the_configuration_names_the_key_of_a_bad_parameter():
    from testbed.config import ConfigError
    from tests.conftest import compose_config

    with pytest.raises(ConfigError, match="policies.ds2.warm_up_s: must be >= 0"):
        compose_config("policy=ds2", "policies.ds2.warm_up_s=-1")


def test_the_defaults_are_the_authors_configuration():
    p = Ds2Params()
    assert (p.policy_interval_s, p.warm_up_s, p.activation, p.over_provision) == (10.0, 20.0, 1, 0.0)
    p.validate()


# -- short simulated runs ------------------------------------------------------------------------------

def test_job_mode_run_takes_the_mean_worker_rate_and_misses_the_key_skew():
    from testbed.sim.job import JobSimulation
    from tests.conftest import compose_config
    from tests.unit.test_job_sim import Flat, RescaleOnce

    cfg = compose_config("evaluation=daedalus", "duration_min=10", "job.latency_samples=600")

    class FromTwelve(Ds2Policy):
        initial_parallelism = RescaleOnce.initial_parallelism

    sim = JobSimulation(cfg, FromTwelve(Ds2Params()), Flat(1000.0, 600), seed=3)
    # a busy worker processes mu = 133.3 items/s, so DS2 wants ceil(1000 / 133.3) = ceil(7.5) = 8 and
    # holds there (one step, then the fixed point); but the key groups do not spread evenly over 8
    # workers, whose capacity is mu / (largest share) = 666.7/s: the per-instance mean misses skew
    assert sim.mu == pytest.approx(400 / 3)
    res = sim.run()
    assert res.tables["rescales"]["t_s"] == [20.0] and res.tables["rescales"]["to_n"] == [8]
    assert sim.capacity(8) == pytest.approx(2000 / 3)


@pytest.mark.slow
def test_operator_mode_run_on_the_oee_topology():
    from testbed.experiment import build_pattern, config_for, plan_runs, policy_for
    from testbed.sim.simulator import Simulation
    from tests.conftest import compose_config

    cfg = compose_config("policy=ds2", "pattern=stepwise", "duration_min=10", "reps=1")
    spec = plan_runs(cfg)[0]
    run_cfg = config_for(cfg, spec)
    result = Simulation(run_cfg, policy_for(run_cfg), build_pattern(run_cfg.pattern, cfg.seed), spec.seed,
                        spec.btu_minutes).run()
    reasons = [r for r in result.tables["actions"]["reason"] if r.startswith("ds2: target input")]
    assert reasons, "the load steps must make DS2 rescale some operator"
