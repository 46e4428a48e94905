"""The BTU paper's report contribution (Hochreiner et al., PeerJ CS 2017): its published Tables 3-6
(experiments/reference/paper_btu_results.csv) and its claims (reporting.paper_comparison). Its
metrics are the platform's own (reporting.metrics), so it adds none, and its per-pattern sections
are the platform's."""
from __future__ import annotations

from reporting.evaluations import EvaluationReport, register_report
from reporting.paper_comparison import check_claims, compare, load_reference

BTU = register_report(EvaluationReport(name="btu", reference=load_reference, compare=compare, claims=check_claims))
