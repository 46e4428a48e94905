"""The default topology of an operator instance: the manufacturing OEE topology's edges.

Kept here (and not read from ``experiments/conf``) because the operator image carries only the
``operators`` package; a unit test checks it against ``experiments/conf/topology/oee.yaml``.
"""
from __future__ import annotations

from typing import Dict, List

# producer -> downstream operators
OEE_SOURCES: Dict[str, List[str]] = {
    "S1_availability": ["O2"],
    "S2_production": ["O1"],
    "S3_temperature": ["O6"],
}
OEE_OPERATORS: Dict[str, List[str]] = {
    "O1": ["O3", "O4", "O5"],
    "O2": ["O8"],
    "O3": ["O7"],
    "O4": ["O7"],
    "O5": ["O7"],
    "O6": ["O8"],
    "O7": ["O9"],
    "O8": [],
    "O9": ["O8"],
}


def oee_topology() -> Dict[str, Dict[str, List[str]]]:
    """A fresh copy, in the shape of the ``TOPOLOGY`` variable: ``{"sources": ..., "operators": ...}``."""
    return {"sources": {k: list(v) for k, v in OEE_SOURCES.items()},
            "operators": {k: list(v) for k, v in OEE_OPERATORS.items()}}
