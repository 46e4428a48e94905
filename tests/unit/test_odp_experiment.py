"""The ODP paper's §7.1 in the simulator (docs/papers/odp.md#the-71-experiment): ODP_A places every
instance on fully available hosts; ODP_R has the lower response time and availability 0.99^k for
its k instances on 99 % hosts. And the §7.2-style comparison runs: ODP_T's reassignment does not
leave more inter-host traffic than the T-Storm-like heuristic's."""
from __future__ import annotations

import math

import pytest

from reporting.evaluations.odp.runs import claims, paper_71_table, runs_table, summary
from testbed.emulation import EmulationConfig, NetworkModel
from testbed.experiment import run_experiment
from tests.conftest import compose_config


def test_the_99_percent_hosts_are_the_nearest_to_the_provider():
    # the evaluation's Decision: the four hosts with the shortest mean round trip to vm1 (seed 1)
    cfg = compose_config("evaluation=odp")
    em = cfg.backend.emulation
    net = NetworkModel(EmulationConfig(seed=em.seed))
    rt = {f"vm{k}": net.mean_delay_ms("vm1", f"vm{k}") + net.mean_delay_ms(f"vm{k}", "vm1") for k in range(2, 9)}
    nearest = sorted(rt, key=rt.get)[:4]
    assert sorted(h for h, a in em.availability.items() if a == 0.99) == sorted(nearest)
    assert em.provider_host == "vm1" and cfg.placement.pins == {"consumer": "vm1"}


# the solves stop at a wall-clock limit, which a loaded machine can bring within reach of a solve of
# a few CPU seconds: these tests check the optimal placements, so the limit is far away
LIMIT = "placement.odp.time_limit_s=900"


@pytest.mark.slow
def test_section_71_odp_a_against_odp_r(tmp_path):
    run_experiment(compose_config("evaluation=odp", "reps=1", "duration_min=5", f"out={tmp_path}", "summary=false",
                                  "workers=1", LIMIT))
    measured = summary(runs_table(tmp_path))
    odp_a, odp_r = measured.loc["odp-a"], measured.loc["odp-r"]
    # ODP_A: nothing on a 99 % host, A = 1, no tuple lost
    assert odp_a["k"] == 0 and odp_a["A_model"] == 1.0 and odp_a["loss_pct"] == 0.0
    # ODP_R: faster, and its model availability is 0.99^k for the k instances on 99 % hosts
    assert odp_r["R_ms"] < odp_a["R_ms"]
    assert odp_r["k"] >= 1
    assert odp_r["A_model"] == pytest.approx(0.99 ** odp_r["k"], rel=1e-12)
    # a tuple passes one instance per stage, so it loses less than the model's 1 - A: 0 < loss < 1 - A
    assert 0.0 < odp_r["loss_pct"] < 100.0 * (1 - odp_r["A_model"])
    assert odp_a["solve_status"] == "optimal" and odp_r["solve_status"] == "optimal"
    verdicts = claims(measured).set_index("claim")["measured"]
    assert verdicts["O2"] == "holds" and verdicts["O3"] == "holds"
    table = paper_71_table(measured)
    assert table.loc["odp-a", "R_ratio_to_odp_r"] > 1.0 and math.isclose(table.loc["odp-r", "paper_A"], 0.99 ** 8)


@pytest.mark.slow
def test_section_72_tstorm_against_odp_t(tmp_path):
    run_experiment(compose_config("evaluation=odp_heuristics", "reps=1", "duration_min=10", f"out={tmp_path}",
                                  "summary=false", "workers=1", LIMIT))
    measured = summary(runs_table(tmp_path, after_s=200.0))
    tstorm, odp_t = measured.loc["tstorm"], measured.loc["odp-t"]
    # ODP_T reassigns once, at its first cycle at or after 100 s, to the traffic optimum
    assert odp_t["solves"] == 2 and 100.0 <= odp_t["last_reassignment_s"] < 110.0
    assert odp_t["T_items_s"] <= tstorm["T_items_s"] * 1.01  # (items in flight at the window's edges)
    assert tstorm["reassignments"] >= 1
