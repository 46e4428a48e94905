"""The ILP against exhaustive enumeration, the two solvers against each other, infeasibility,
time limits, and the `testbed odp solve` command."""
from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from testbed.odp_study.generator import Table2, Topology, table2_instance
from testbed.placement.odp import (
    Link,
    NetworkObjective,
    Node,
    ObjectiveForm,
    OdpInstance,
    Operator,
    ResponseTimeForm,
    SolverName,
    SolverSettings,
    Status,
    Weights,
    instance_to_dict,
    solve,
)
from testbed.placement.odp.exhaustive import enumerate_optimum
from testbed.placement.odp.indexed import index
from testbed.placement.odp.metrics import assignment_of, violations
from tests import guarded

ROOT = Path(__file__).resolve().parents[2]
EXACT = SolverSettings(mip_rel_gap=0.0)


def heterogeneous(seed: int, topology: Topology, n: int, m: int, weights: Weights,
                  network: NetworkObjective | None = None, bandwidth: bool = False,
                  sampled: bool = False) -> OdpInstance:
    """A Table 2 instance made heterogeneous: speeds, availabilities, capacities, demands, rates."""
    rng = np.random.default_rng(seed)
    base = table2_instance(Table2(n, m, topology, seed=seed, r_ms=100.0))
    ops = tuple(
        replace(o, C=(float(rng.integers(1, 3)),), R=float(rng.uniform(20, 120)),
                candidates=tuple(sorted(rng.choice(base.node_ids, size=max(1, m - 1), replace=False)))
                if sampled and k % 2 == 0 else None)
        for k, o in enumerate(base.operators)
    )
    nodes = tuple(Node(nd.id, (float(rng.integers(3, 7)),), float(rng.choice([1.0, 1.5, 2.0])),
                       float(rng.choice([0.95, 0.99, 1.0]))) for nd in base.nodes)
    links = tuple(Link(link.source, link.target, link.d, float(rng.choice([0.98, 1.0])),
                       float(rng.uniform(2, 12)) if bandwidth else math.inf) for link in base.links)
    edges = tuple(replace(e, rate=float(rng.uniform(1, 10))) for e in base.edges)
    return OdpInstance(ops, edges, nodes, links, weights, network)


CASES = [  # (seed, topology, n, m, weights, network objective, bandwidth, sampled candidates)
    (1, Topology.SEQUENTIAL, 5, 3, Weights(1, 0, 0), None, False, False),
    (2, Topology.FAT, 5, 3, Weights(1, 0, 0), None, False, False),
    (3, Topology.SEQUENTIAL, 6, 3, Weights(0.5, 0.5, 0), None, False, True),
    (4, Topology.FAT, 6, 3, Weights(0.3, 0.7, 0), None, False, False),
    (5, Topology.FAT, 5, 3, Weights(0, 1, 0), None, False, True),
    (6, Topology.SEQUENTIAL, 5, 3, Weights(0.4, 0.2, 0.4), NetworkObjective.TRAFFIC, True, False),
    (7, Topology.FAT, 5, 3, Weights(0.5, 0, 0.5), NetworkObjective.NETWORK_USAGE, True, False),
    (8, Topology.FAT, 6, 3, Weights(0.2, 0.3, 0.5), NetworkObjective.ELASTIC_ENERGY, False, True),
    (9, Topology.SEQUENTIAL, 6, 3, Weights(0, 0, 1), NetworkObjective.ELASTIC_ENERGY, True, True),
    (10, Topology.FAT, 6, 3, Weights(1, 0, 0), None, True, False),
    (11, Topology.SEQUENTIAL, 6, 3, Weights(0.6, 0.4, 0), None, True, True),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"seed{c[0]}-{c[1].value}")
def test_the_optimum_equals_exhaustive_enumeration(case):
    seed, topology, n, m, weights, network, bandwidth, sampled = case
    inst = heterogeneous(seed, topology, n, m, weights, network, bandwidth, sampled)
    reference = enumerate_optimum(inst)
    result = solve(inst, EXACT)
    if not reference.feasible:
        assert result.status is Status.INFEASIBLE
        return
    assert result.status is Status.OPTIMAL
    ix = index(inst)
    assert violations(ix, assignment_of(ix, result.placement)) == []
    assert result.utility == pytest.approx(reference.metrics.utility, abs=1e-7)
    assert result.objective == pytest.approx(reference.metrics.utility, abs=1e-7)  # F' = F at the optimum
    if weights.r > 0:
        assert result.r_ms == pytest.approx(result.response_time_ms, abs=1e-6)


def test_the_cases_are_feasible_and_their_constraints_bind():
    """Without its capacities (11) most cases would have a better optimum, and without its
    bandwidths (17) at least one: the enumeration checks those constraints, not just the objective."""
    capacity_binds = bandwidth_binds = 0
    for seed, topology, n, m, weights, network, bandwidth, sampled in CASES:
        inst = heterogeneous(seed, topology, n, m, weights, network, bandwidth, sampled)
        best = enumerate_optimum(inst)
        assert best.feasible
        roomy = replace(inst, nodes=tuple(replace(nd, C=(100.0,)) for nd in inst.nodes))
        capacity_binds += enumerate_optimum(roomy).metrics.utility > best.metrics.utility + 1e-9
        wide = replace(inst, links=tuple(replace(link, B=math.inf) for link in inst.links))
        bandwidth_binds += enumerate_optimum(wide).metrics.utility > best.metrics.utility + 1e-9
    assert capacity_binds >= len(CASES) - 2 and bandwidth_binds >= 1


@pytest.mark.parametrize("topology", list(Topology))
def test_the_potentials_form_has_the_same_optimum(topology):
    inst = heterogeneous(11, topology, 6, 3, Weights(1, 0, 0))
    paths = solve(inst, EXACT)
    potentials = solve(inst, replace(EXACT, rt_form=ResponseTimeForm.POTENTIALS))
    assert potentials.size.rt_form == "potentials"
    assert potentials.response_time_ms == pytest.approx(paths.response_time_ms, abs=1e-6)


def test_raw_r_minimises_the_response_time():
    inst = table2_instance(Table2(6, 4, Topology.SEQUENTIAL, seed=2))
    raw = solve(inst, replace(EXACT, objective_form=ObjectiveForm.RAW_R))
    normalised = solve(inst, EXACT)
    assert raw.objective == pytest.approx(raw.response_time_ms, abs=1e-6)
    assert raw.response_time_ms == pytest.approx(normalised.response_time_ms, abs=1e-6)
    with pytest.raises(ValueError):
        solve(replace(inst, weights=Weights(0.5, 0.5, 0)), replace(EXACT, objective_form=ObjectiveForm.RAW_R))


def partition_instance(sizes):
    """Theorem 1's embedding: two nodes with half the total demand each, zero delays."""
    half = sum(sizes) / 2
    ops = tuple(Operator(f"o{k}", (float(c),), 1.0) for k, c in enumerate(sizes))
    nodes = (Node("u", (half,)), Node("v", (half,)))
    return OdpInstance(ops, (), nodes, (Link("u", "v", 0.0),), Weights(1, 0, 0))


@pytest.mark.parametrize("solver", list(SolverName))
def test_a_partition_instance_without_a_partition_is_infeasible(solver):
    settings = SolverSettings(solver=solver)
    none = solve(partition_instance([3, 3, 3, 1]), settings)  # no subset sums to 5
    assert none.status is Status.INFEASIBLE and none.placement is None and none.response_time_ms is None
    some = solve(partition_instance([3, 2, 3, 2]), settings)
    assert some.status is Status.OPTIMAL
    assert sorted(some.placement.values()).count("u") == 2


@pytest.mark.parametrize("case", CASES[:2] + CASES[3:4] + CASES[6:8], ids=lambda c: f"seed{c[0]}")
def test_highs_and_cbc_agree_on_optimal_values(case):
    seed, topology, n, m, weights, network, bandwidth, sampled = case
    inst = heterogeneous(seed, topology, n, m, weights, network, bandwidth, sampled)
    highs = solve(inst, EXACT)
    cbc = solve(inst, replace(EXACT, solver=SolverName.CBC))
    assert highs.status is cbc.status is Status.OPTIMAL
    assert cbc.objective == pytest.approx(highs.objective, abs=1e-6)  # CBC prints 8 decimals
    assert cbc.utility == pytest.approx(highs.utility, abs=1e-7)


@pytest.mark.parametrize("solver", list(SolverName))
def test_a_time_limited_solve_reports_the_limit_and_a_gap(solver):
    inst = table2_instance(Table2(12, 10, Topology.FAT, seed=1))  # proven optimal only after minutes
    # the limit is wall-clock time: HiGHS finds its first incumbent after ~0.4 s of CPU, which a
    # loaded machine may stretch past a short limit, so the limit grows until the solve has one
    for limit_s in (2.0, 8.0, 32.0):
        result = solve(inst, SolverSettings(solver=solver, time_limit_s=limit_s))
        if result.placement is not None:
            break
    assert result.status is Status.TIME_LIMIT  # never "optimal", whatever PuLP says
    assert result.solve_s < 10 * limit_s  # the limit held: an unlimited solve takes minutes
    assert result.placement is not None and result.gap is not None and result.gap > 1e-3
    assert result.bound is not None and result.bound > result.objective
    assert result.to_json()["status"] == "time_limit"


def test_the_trace_records_incumbent_and_bound_over_time():
    inst = table2_instance(Table2(8, 8, Topology.SEQUENTIAL, seed=1, c_node=2))  # ~1 s, solved to the gap
    result = solve(inst, SolverSettings(trace=True))
    times = [p.t_s for p in result.trace]
    assert len(times) >= 2 and times == sorted(times)
    found = [p for p in result.trace if not math.isnan(p.incumbent) and abs(p.incumbent) < 1e30]
    assert found and all(p.bound >= p.incumbent - 1e-9 for p in found)  # maximising F'
    assert result.status is Status.OPTIMAL and found[-1].gap <= 1e-4


def run_cli(*args, cwd):
    return guarded.run([sys.executable, "-m", "testbed.cli", "odp", *args], cwd=cwd, cpu_s=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_the_solve_command_prints_the_result_as_json(tmp_path):
    inst = heterogeneous(6, Topology.SEQUENTIAL, 5, 3, Weights(0.4, 0.2, 0.4), NetworkObjective.TRAFFIC, True)
    path = tmp_path / "instance.json"
    path.write_text(json.dumps(instance_to_dict(inst)))
    proc = run_cli("solve", str(path), "solver=cbc", "time_limit_s=30", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["status"] == "optimal" and out["solver"] == "cbc"
    assert set(out["placement"]) == set(inst.operator_ids)
    assert out["variables"]["x"] == 15 and out["variables"]["y"] == 4 * 9
    assert out["constraints"]["total"] > 0 and out["constraints"]["bandwidth"] > 0
    for key in ("response_time_ms", "availability", "objective", "bound", "gap", "solve_s"):
        assert out[key] is not None
    assert out["utility"] == pytest.approx(enumerate_optimum(inst).metrics.utility, abs=1e-6)


@pytest.mark.slow
def test_the_solve_command_rejects_a_malformed_instance_in_one_line(tmp_path):
    data = instance_to_dict(table2_instance(Table2(3, 2, Topology.SEQUENTIAL)))
    data["nodes"][1]["A"] = 1.5
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    proc = run_cli("solve", str(path), cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().count("\n") == 0 and "nodes[1].A" in proc.stderr
    bad_key = run_cli("solve", str(path), "solver=gurobi", cwd=tmp_path)
    assert bad_key.returncode == 2 and "solver" in bad_key.stderr
