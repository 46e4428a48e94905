"""The event log's `placements` table: every placement decision of a run (a new instance's host or
a migration's target) with the solver run behind it when the strategy solved one (ODP)."""
from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Sequence

from testbed.actions import ActionRecord

_SOLVE = re.compile(r"^odp solve (\d+):")
COLUMNS = ("t_s", "action", "operator", "instance", "host", "reason", "solve", "solver_status", "objective", "gap",
           "solve_s", "solve_cpu_s")


def placements_table(records: Sequence[ActionRecord], placement: Optional[Any]) -> Dict[str, List[Any]]:
    """One row per scale-up (instance = the new instance) and per migration (instance = the one
    moved, host = its target). Solver columns come from the strategy's `runs` (ODP's SolveRecord),
    joined on the solve number the reason names, or for a host a policy asked ODP for one instance
    (`host_for`, the policy writing the reason) on the time, operator and host of that answer; empty
    for the other strategies."""
    runs = {r.solve: r for r in getattr(placement, "runs", ())}
    choices: Dict[tuple, List[int]] = {}
    for t, operator, host, solve in getattr(placement, "choices", ()):
        choices.setdefault((t, operator, host), []).append(solve)
    cols: Dict[str, List[Any]] = {c: [] for c in COLUMNS}
    for rec in records:
        if rec.action not in ("scale_up", "migrate"):
            continue
        match = _SOLVE.match(rec.reason)
        if match:
            run = runs.get(int(match.group(1)))
        else:
            target = rec.target_host if rec.action == "migrate" else rec.host
            waiting = choices.get((rec.t_s, rec.operator, target), [])
            run = runs.get(waiting.pop(0)) if waiting else None
        row = {
            "t_s": rec.t_s, "action": rec.action, "operator": rec.operator, "instance": rec.instance,
            "host": rec.target_host if rec.action == "migrate" else rec.host, "reason": rec.reason,
            "solve": run.solve if run else None, "solver_status": run.status if run else None,
            "objective": run.objective if run else None, "gap": run.gap if run else None,
            "solve_s": run.solve_s if run else None, "solve_cpu_s": run.cpu_s if run else None,
        }
        for c in COLUMNS:
            cols[c].append(row[c])
    return cols
