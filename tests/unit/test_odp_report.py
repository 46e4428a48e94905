"""The ODP evaluation's report entry (reporting/evaluations/odp.py): claims on hand-made summaries."""
from __future__ import annotations

import pandas as pd

from reporting.evaluations import report_for
from reporting.evaluations.odp import check_claims, load_reference


def summary(rows):
    return pd.DataFrame([{"pattern": "tag_and_count", "config": c, "btu_minutes": None, "metric": m, "mean": v,
                          "sd": 0.0, "n": 3} for c, m, v in rows])


ODP_71 = [("odp-r", "R_ms", 90.0), ("odp-r", "k", 5), ("odp-r", "A_model", 0.99 ** 5), ("odp-r", "loss_pct", 2.7),
          ("odp-r", "delivered_pct", 97.3), ("odp-r", "solve_cpu_ms_max", 300.0), ("odp-r", "solve_ms_max", 900.0),
          ("odp-a", "R_ms", 180.0), ("odp-a", "k", 0), ("odp-a", "A_model", 1.0), ("odp-a", "loss_pct", 0.0),
          ("odp-a", "delivered_pct", 100.0), ("odp-a", "solve_cpu_ms_max", 50.0), ("odp-a", "solve_ms_max", 80.0)]


def verdicts(table):
    return dict(zip(table["claim"], table["measured"], strict=True))


def test_section_71_claims():
    assert report_for("odp").name == "odp" and report_for("odp_heuristics").name == "odp_heuristics"
    got = check_claims(summary(ODP_71), load_reference())
    assert verdicts(got) == {"O2": "holds", "O3": "holds", "O7": "holds"}
    # A that is not 0.99^k, ODP_A slower than 420 ms of CPU, ODP_R not faster
    bad = [(c, m, {("odp-r", "A_model"): 0.95, ("odp-a", "solve_cpu_ms_max"): 500.0,
                   ("odp-r", "R_ms"): 200.0}.get((c, m), v)) for c, m, v in ODP_71]
    assert verdicts(check_claims(summary(bad), load_reference())) == {
        "O2": "does not hold", "O3": "does not hold", "O7": "does not hold"}


def test_section_72_claim():
    rows = [("tstorm", "T_items_s", 20.0), ("tstorm", "reassignments_events", 1),
            ("tstorm", "last_reassignment_s", 100),
            ("tstorm", "R_ms", 100.0), ("odp-t", "T_items_s", 20.0), ("odp-t", "R_ms", 120.0)]
    got = check_claims(summary(rows), load_reference())
    assert verdicts(got) == {"O6": "does not hold"}  # one reassignment, not the paper's two
    rows[1] = ("tstorm", "reassignments_events", 2)
    assert verdicts(check_claims(summary(rows), load_reference())) == {"O6": "holds"}
