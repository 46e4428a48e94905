"""The BTU paper's evaluation (Hochreiner et al., PeerJ CS 2017; experiments/conf/evaluation/btu.yaml):
its published Tables 3-6 (`REFERENCE`) and its four headline claims are declared in the YAML and
checked by reporting/claims.py. Its metrics are the platform's own (reporting.metrics) and so are
its per-pattern sections, so it adds nothing else. The fidelity tools (testbed/fidelity/) fit the
simulator to this table."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from reporting.evaluations import declared_report, register_report
from reporting.paper_comparison import load_reference as load_long

REFERENCE = Path(__file__).resolve().parents[2] / "experiments" / "reference" / "paper_btu_results.csv"


def load_reference(path: Path = REFERENCE) -> pd.DataFrame:
    """The published Tables 3-6 in the long format."""
    return load_long(path)


BTU = register_report(declared_report("btu"))
