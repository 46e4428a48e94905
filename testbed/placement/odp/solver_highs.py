"""HiGHS adapter (highspy): the model description in, the solver's own status, bound and gap out."""
from __future__ import annotations

import math
import time
from typing import Any, List

import highspy
import numpy as np

from testbed.placement.odp.model import LinearModel
from testbed.placement.odp.result import RawSolution, SolverSettings, Status, TracePoint, cpu_seconds

_STATUS = {
    highspy.HighsModelStatus.kOptimal: Status.OPTIMAL,
    highspy.HighsModelStatus.kTimeLimit: Status.TIME_LIMIT,
    highspy.HighsModelStatus.kInfeasible: Status.INFEASIBLE,
}

TRACE_EVERY_S = 0.25  # sampling period of the gap trace between improvements


def solve_highs(model: LinearModel, settings: SolverSettings) -> RawSolution:
    h = highspy.Highs()
    h.setOptionValue("output_flag", bool(settings.log))
    h.setOptionValue("threads", int(settings.threads))
    h.setOptionValue("random_seed", int(settings.seed))
    h.setOptionValue("mip_rel_gap", float(settings.mip_rel_gap))
    if settings.time_limit_s is not None:
        h.setOptionValue("time_limit", float(settings.time_limit_s))
    h.passModel(_lp(model))
    trace: List[TracePoint] = []
    if settings.trace:
        _subscribe_trace(h, trace)
    started, cpu = time.perf_counter(), cpu_seconds()
    h.run()
    solve_s, cpu_s = time.perf_counter() - started, cpu_seconds() - cpu
    model_status = h.getModelStatus()
    info = h.getInfo()
    has_solution = info.primal_solution_status == highspy.kSolutionStatusFeasible
    values = np.asarray(h.getSolution().col_value) if has_solution else None
    objective = info.objective_function_value if has_solution else None
    bound = info.mip_dual_bound if math.isfinite(info.mip_dual_bound) else None
    gap = info.mip_gap if has_solution and math.isfinite(info.mip_gap) else None
    if settings.trace:
        trace.append(TracePoint(solve_s, objective if objective is not None else math.nan,
                                bound if bound is not None else math.nan, gap if gap is not None else math.nan))
    return RawSolution(
        status=_STATUS.get(model_status, Status.ERROR), solver_status=h.modelStatusToString(model_status),
        values=values, objective=objective, bound=bound, gap=gap, solve_s=solve_s, cpu_s=cpu_s,
        nodes=int(info.mip_node_count), lp_iterations=int(info.simplex_iteration_count), trace=tuple(trace),
    )


def _lp(model: LinearModel) -> "highspy.HighsLp":
    lp = highspy.HighsLp()
    lp.num_col_ = model.num_cols
    lp.num_row_ = model.num_rows
    lp.col_cost_ = model.cost
    lp.col_lower_ = model.col_lower
    lp.col_upper_ = model.col_upper
    lp.row_lower_ = model.row_lower
    lp.row_upper_ = model.row_upper
    lp.offset_ = model.offset
    lp.sense_ = highspy.ObjSense.kMaximize if model.maximise else highspy.ObjSense.kMinimize
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_ = model.num_cols
    lp.a_matrix_.num_row_ = model.num_rows
    lp.a_matrix_.start_ = model.row_start.astype(np.int32)
    lp.a_matrix_.index_ = model.col_index.astype(np.int32)
    lp.a_matrix_.value_ = model.value
    lp.integrality_ = [highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous
                       for i in model.integer]
    return lp


def _subscribe_trace(h: "highspy.Highs", trace: List[TracePoint]) -> None:
    """Incumbent and bound over time (Fig. 10c): every improvement, and a sample every
    TRACE_EVERY_S from the interrupt callback, which HiGHS calls often during branch and bound."""
    last = [-math.inf]

    def record(event: Any, forced: bool) -> None:
        out = event.data_out
        t = float(out.running_time)
        if not forced and t - last[0] < TRACE_EVERY_S:
            return
        last[0] = t
        trace.append(TracePoint(t, float(out.mip_primal_bound), float(out.mip_dual_bound), float(out.mip_gap)))

    h.cbMipImprovingSolution.subscribe(lambda e: record(e, True))
    h.cbMipInterrupt.subscribe(lambda e: record(e, False))
