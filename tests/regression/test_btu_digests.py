"""The BTU evaluation's event-log tables are exactly those recorded before the platform refactor
(policy registry, placement strategies, observations): 4 patterns x 4 configurations, one repetition,
the calibrated profile named explicitly. Tables added since are not covered (they did not exist)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.eventlog import find_runs
from testbed.experiment import run_experiment
from tests.conftest import compose_config
from tests.regression.table_digests import run_digests

RECORDED = Path(__file__).with_name("btu_digests.json")
TABLES = ("load", "samples", "processed", "queues", "instances", "hosts", "actions", "leases")


@pytest.mark.slow
def test_btu_evaluation_tables_unchanged(tmp_path: Path) -> None:
    for pattern in ("stepwise", "two_level", "random_walk_1", "random_walk_2"):
        run_experiment(compose_config("evaluation=btu", f"pattern={pattern}", "reps=1", "profile=paper_calibrated",
                                      f"out={tmp_path}", "summary=false"))
    expected = json.loads(RECORDED.read_text())
    measured = run_digests(find_runs(tmp_path), tmp_path, TABLES)
    assert sorted(measured) == sorted(expected)
    changed = sorted(k for k in expected if measured[k] != expected[k])
    assert not changed, f"{len(changed)} table(s) changed, e.g. {changed[:5]}"
