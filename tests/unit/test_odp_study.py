"""The scalability study: grids, the analysis on synthetic data (a claim that the data contradict is
reported as not holding), and the reduced grid end to end through `testbed odp study`."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pandas as pd
import pytest

from testbed.odp_study.analysis import FAILS, HOLDS, claims, degradation, loglog_slope
from testbed.odp_study.generator import Table2, Topology, candidate_sets, delays
from testbed.odp_study.grid import FULL, REDUCED, points
from testbed.odp_study.report import load
from tests import guarded

ROOT = Path(__file__).resolve().parents[2]


def test_the_generator_is_seeded_and_sampling_keeps_the_delays():
    a = Table2(7, 5, Topology.FAT, seed=3)
    assert (delays(a) == delays(Table2(7, 5, Topology.FAT, seed=3, candidate_fraction=0.4))).all()
    assert not (delays(a) == delays(Table2(7, 5, Topology.FAT, seed=4))).all()
    assert delays(a).min() >= 1.0 and abs(delays(Table2(1, 60, seed=1)).mean() - 22) < 1
    sets = candidate_sets(Table2(7, 5, seed=3, candidate_fraction=0.4))
    assert all(len(c) == 2 and len(set(c)) == 2 for c in sets)
    assert sets == candidate_sets(Table2(7, 5, seed=3, candidate_fraction=0.4))


def test_the_full_grid_is_the_papers():
    by_experiment: dict = {}
    for p in points(FULL):
        for e in p.experiments:
            by_experiment.setdefault(e, set()).add((p.params.topology, p.params.n_ops, p.params.n_nodes,
                                                    p.params.c_node, p.params.candidate_fraction, p.params.seed))
    assert {n for _, n, m, *_ in by_experiment["fig9a"]} == {10, 20, 30, 40, 50}
    assert {m for _, n, m, *_ in by_experiment["fig9b"]} == set(range(10, 101, 10))
    assert {c for *_, c, f, s in by_experiment["fig9c"]} == set(map(float, range(2, 11)))
    assert {(n, m) for _, n, m, *_ in by_experiment["sc1"]} == {(50, 20)}
    assert {(n, m) for _, n, m, *_ in by_experiment["sc2"]} == {(20, 50)}
    assert len(by_experiment["fig10ab"]) == 2 * 10 * 5  # two shapes, 10 % … 100 %, five seeds
    assert {(n, m) for _, n, m, *_ in by_experiment["fig10c"]} == {(20, 100)}
    # one solve per instance: the 20 × 20 baseline serves 9a, 9b and 9c
    ids = [p.instance_id for p in points(FULL) if not p.trace]
    assert len(ids) == len(set(ids))


def synthetic(time_of) -> pd.DataFrame:
    """Results rows for the reduced grid's points with a made-up time (and work) per instance."""
    rows = []
    for p in points(REDUCED):
        q = p.params
        t = time_of(q)
        rows.append({
            "run_id": p.instance_id + ("-trace" if p.trace else ""), "instance_id": p.instance_id,
            "experiments": ";".join(p.experiments), "topo": q.topology.value, "n_ops": q.n_ops,
            "n_nodes": q.n_nodes, "C_u": q.c_node, "cand_frac": q.candidate_fraction, "seed": q.seed,
            "status": "optimal", "time_s": t, "cpu_s": t, "lp_iterations": int(t * 1000),
            "response_time_ms": 3000 + 30 / q.candidate_fraction, "r_min_ms": 3000.0, "r_max_ms": 3100.0,
        })
    return pd.DataFrame(rows)


def verdicts(df, trace=None):
    trace = trace if trace is not None else pd.DataFrame(columns=["run_id", "topo", "t_s", "incumbent", "bound", "gap"])
    return {c.id: c.verdict["wall"] for c in claims(df, trace, REDUCED)}


def test_claims_hold_on_data_shaped_like_the_papers():
    def paper_like(q):
        hard = 10.0 if q.topology is Topology.FAT else 1.0
        return hard * q.n_ops ** 4 * q.n_nodes ** 1.5 / q.c_node * q.candidate_fraction ** 3 * 1e-4
    trace = pd.DataFrame({"run_id": ["a"] * 4, "topo": ["seq", "seq", "fat", "fat"], "t_s": [0.5, 1, 1, 3],
                          "incumbent": [1, 1, 1, 1], "bound": [1, 1, 1, 1], "gap": [0.5, 0.05, 0.9, 0.3]})
    v = verdicts(synthetic(paper_like), trace)
    assert v == {"O8a": HOLDS, "O8b": HOLDS, "O9a": HOLDS, "O9b": "not measured", "O10a": HOLDS,
                 "O10b": v["O10b"], "O11": HOLDS, "O12": HOLDS}


def test_claims_the_data_contradict_are_reported_as_not_holding():
    def contrary(q):  # nodes matter more than operators, capacity and sampling slow it down, seq harder
        hard = 10.0 if q.topology is Topology.SEQUENTIAL else 1.0
        return hard * q.n_ops * q.n_nodes ** 4 * q.c_node / q.candidate_fraction * 1e-4
    trace = pd.DataFrame({"run_id": ["a"] * 2, "topo": ["seq", "fat"], "t_s": [3, 1], "incumbent": [1, 1],
                          "bound": [1, 1], "gap": [0.05, 0.05]})
    v = verdicts(synthetic(contrary), trace)
    assert {k: v[k] for k in ("O8a", "O8b", "O9a", "O10a", "O11", "O12")} == dict.fromkeys(
        ("O8a", "O8b", "O9a", "O10a", "O11", "O12"), FAILS)


def test_degradation_measures():
    df = synthetic(lambda q: 1.0)
    deg = degradation(df).query("topo == 'fat' and seed == 1").set_index("cand_frac")
    r_opt, r_s = 3030.0, 3000 + 30 / 0.4
    assert deg.loc[0.4, "R_s/R_opt"] == pytest.approx(r_s / r_opt)
    assert deg.loc[0.4, "excess"] == pytest.approx((r_s - 3000) / 30)  # (R_s − ΣR)/(R_opt − ΣR)
    assert deg.loc[0.4, "F_opt/F_s"] == pytest.approx((3100 - r_opt) / (3100 - r_s))
    assert deg.loc[1.0, "excess"] == 1.0
    assert loglog_slope(pd.Series([1, 2, 4]), pd.Series([3, 12, 48])) == pytest.approx(2.0)


@pytest.mark.slow
def test_the_reduced_study_end_to_end(tmp_path):
    out = tmp_path / "study"
    proc = guarded.run([sys.executable, "-m", "testbed.cli", "odp", "study", "grid=reduced", f"out={out}"],
                       cwd=tmp_path, cpu_s=900, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    df, trace = load(out, REDUCED)
    assert len(df) == len(points(REDUCED))
    solved = df[df["experiments"] != "fig10c"]
    assert (solved["status"] == "optimal").all()  # the reduced grid solves to optimality
    assert set(trace["topo"]) == {"seq", "fat"}
    assert sorted(p.name for p in out.glob("*.png")) == ["fig10ab.png", "fig10c.png", "fig9a.png", "fig9b.png",
                                                          "fig9c.png"]
    summary = (out / "summary.md").read_text()
    found = {c.id: c for c in claims(df, trace, REDUCED)}
    for claim in found.values():  # the summary states what the measured data say
        assert f"| {claim.id} |" in summary and f"**{claim.verdict['wall']}**" in summary
    # Deterministic (simplex iterations, one thread, fixed seed): the trends the brief names
    assert found["O8a"].verdict["work"] == HOLDS  # faster growth with operators than with nodes
    assert found["O9a"].verdict["work"] == HOLDS  # falling with node capacity
    assert found["O10a"].verdict["work"] == HOLDS  # falling with candidate sampling
    # Time, with factors far beyond run-to-run noise
    for measure in ("wall", "cpu"):
        assert found["O10a"].verdict[measure] == HOLDS and found["O12"].verdict[measure] == HOLDS
    assert "cores" in summary and (df["cpu_s"] >= 0).all() and df["cpu_s"].sum() > 0
