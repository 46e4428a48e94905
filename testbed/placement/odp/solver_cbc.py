"""CBC adapter through PuLP, the cross-check solver.

PuLP labels a run that a time limit stopped with an incumbent "Optimal", so the status, bound and
gap are read from CBC's own log instead. PuLP drops the objective's constant when it writes the MPS
file; a column fixed at 1 carries it, so CBC's objective, bound and relative gap are those of F'
like HiGHS's.
"""
from __future__ import annotations

import math
import re
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

import numpy as np
import pulp

from testbed.placement.odp.model import LinearModel
from testbed.placement.odp.result import RawSolution, SolverSettings, Status, cpu_seconds

_RESULT = re.compile(r"^Result - (.+)$", re.M)
_PRESOLVE = re.compile(r"^(Pre-processing says infeasible.*|Problem is infeasible.*)$", re.M)
_FIELD = re.compile(r"^(Objective value|Lower bound|Upper bound|Gap|Enumerated nodes|Total iterations):\s+(\S+)", re.M)


def solve_cbc(model: LinearModel, settings: SolverSettings) -> RawSolution:
    prob = pulp.LpProblem("odp", pulp.LpMaximize if model.maximise else pulp.LpMinimize)
    cols = [
        prob.add_variable(f"c{k}", lowBound=float(lo), upBound=None if math.isinf(up) else float(up),
                          cat=pulp.LpInteger if integer else pulp.LpContinuous)
        for k, (lo, up, integer) in enumerate(zip(model.col_lower, model.col_upper, model.integer, strict=True))
    ]
    one = prob.add_variable("offset", lowBound=1.0, upBound=1.0)
    terms = [(cols[k], float(model.cost[k])) for k in np.nonzero(model.cost)[0]]
    prob += pulp.LpAffineExpression(terms + [(one, float(model.offset))])
    start = model.row_start
    for r in range(model.num_rows):
        lo, up = float(model.row_lower[r]), float(model.row_upper[r])
        sl = slice(start[r], start[r + 1])
        if start[r] == start[r + 1]:
            continue  # an empty row (a node no operator may use) constrains nothing
        expr = pulp.LpAffineExpression(
            zip((cols[c] for c in model.col_index[sl]), model.value[sl].tolist(), strict=True))
        if lo == up:
            prob += expr == lo, f"r{r}"
        else:
            if math.isfinite(lo):
                prob += expr >= lo, f"r{r}"
            if math.isfinite(up):
                prob += expr <= up, f"r{r}u"
    with tempfile.TemporaryDirectory(prefix="odp-cbc-") as tmp:
        log_path = Path(tmp) / "cbc.log"
        with warnings.catch_warnings():  # PuLP 3 deprecates its bundled CBC for 4.0 (pinned < 4)
            warnings.simplefilter("ignore", DeprecationWarning)
            cmd = pulp.PULP_CBC_CMD(
                msg=False, timeLimit=settings.time_limit_s, threads=settings.threads, gapRel=settings.mip_rel_gap,
                logPath=str(log_path), keepFiles=False,
                options=[f"randomSeed {settings.seed}", f"randomCbcSeed {settings.seed}"],
            )
        started, cpu = time.perf_counter(), cpu_seconds()
        prob.solve(cmd)
        solve_s, cpu_s = time.perf_counter() - started, cpu_seconds() - cpu
        log = log_path.read_text()
        if settings.log:
            print(log)
    return _from_log(log, cols, solve_s, cpu_s, prob.sol_status)


def _from_log(log: str, cols: Sequence[Any], solve_s: float, cpu_s: float, sol_status: int) -> RawSolution:
    result = _RESULT.findall(log)
    presolved = _PRESOLVE.findall(log)
    if result:
        wording = result[-1].strip()
    elif presolved:
        # "infeasible or unbounded": the model is bounded (binaries, r ≥ 0 minimised), so infeasible
        wording = presolved[-1].strip()
    else:
        wording = "no result line in the CBC log"
    fields: Dict[str, str] = dict(_FIELD.findall(log))
    lowered = wording.lower()
    if lowered.startswith("optimal"):
        status = Status.OPTIMAL
    elif "infeasible" in lowered:
        status = Status.INFEASIBLE
    elif "time" in lowered:
        status = Status.TIME_LIMIT
    else:
        status = Status.ERROR
    has_solution = status in (Status.OPTIMAL, Status.TIME_LIMIT) and sol_status in (
        pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible) and "Objective value" in fields
    values = np.array([v.varValue or 0.0 for v in cols]) if has_solution else None
    objective = _float(fields.get("Objective value")) if has_solution else None
    gap = _float(fields.get("Gap"))
    gap = abs(gap) if gap is not None else None  # CBC signs it by the internal (minimising) sense
    bound = _float(fields.get("Lower bound") or fields.get("Upper bound"))
    if status is Status.OPTIMAL:
        # CBC prints no bound for a run it completed: the bound closed to within the gap
        bound = objective if bound is None else bound
        gap = 0.0 if gap is None else gap
    return RawSolution(
        status=status, solver_status=wording, values=values, objective=objective, bound=bound,
        gap=gap if has_solution else None, solve_s=solve_s, cpu_s=cpu_s,
        nodes=_int(fields.get("Enumerated nodes")), lp_iterations=_int(fields.get("Total iterations")),
    )


def _float(text: Optional[str]) -> Optional[float]:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _int(text: Optional[str]) -> Optional[int]:
    value = _float(text)
    return int(value) if value is not None else None
