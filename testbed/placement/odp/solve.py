"""`solve(instance, settings) -> OdpResult`: build the model, run one adapter, read the placement
back and measure it (the reported response time and availability come from the placement)."""
from __future__ import annotations

import logging
import time
from typing import Callable, Dict, Optional

import numpy as np

from testbed.placement.odp.indexed import Indexed, index
from testbed.placement.odp.instance import OdpInstance
from testbed.placement.odp.metrics import evaluate
from testbed.placement.odp.model import LinearModel, build_model
from testbed.placement.odp.result import ModelSize, OdpResult, RawSolution, SolverName, SolverSettings, Status

log = logging.getLogger(__name__)


def _adapter(name: SolverName) -> Callable[[LinearModel, SolverSettings], RawSolution]:
    # imported lazily: a user of one solver need not have the other installed
    if name is SolverName.HIGHS:
        from testbed.placement.odp.solver_highs import solve_highs
        return solve_highs
    from testbed.placement.odp.solver_cbc import solve_cbc
    return solve_cbc


def solve(instance: OdpInstance, settings: Optional[SolverSettings] = None) -> OdpResult:
    settings = settings if settings is not None else SolverSettings()
    started = time.perf_counter()
    ix = index(instance)
    model = build_model(ix, settings.objective_form, settings.rt_form, settings.max_paths)
    build_s = time.perf_counter() - started
    raw = _adapter(SolverName(settings.solver))(model, settings)
    result = decode(ix, model, raw, settings, build_s)
    log.info("odp solve: %s (%s) objective %s bound %s gap %s in %.3f s; |x| %d |y| %d rows %d; %s seed %d",
             result.status.value, raw.solver_status, raw.objective, raw.bound, raw.gap, raw.solve_s,
             result.size.x, result.size.y, result.size.constraints, settings.solver.value, settings.seed)
    return result


def model_size(model: LinearModel) -> ModelSize:
    families: Dict[str, int] = {}
    for name, count in model.families:
        families[name] = families.get(name, 0) + count
    layout = model.layout
    return ModelSize(
        x=layout.nx, y=layout.ny, continuous=model.num_cols - layout.nx - layout.ny,
        constraints=model.num_rows, constraints_by_family=families, nonzeros=model.nnz,
        paths=model.n_paths, rt_form=model.rt_form.value,
    )


def decode(ix: Indexed, model: LinearModel, raw: RawSolution, settings: SolverSettings,
           build_s: float) -> OdpResult:
    placement = metrics = r_ms = None
    if raw.values is not None:
        layout = model.layout
        assignment = np.array([
            layout.candidates[i][int(np.argmax(raw.values[layout.x_start[i]:layout.x_start[i + 1]]))]
            for i in range(ix.n)
        ], dtype=np.int64)
        nodes = ix.instance.node_ids
        placement = {o.id: nodes[u] for o, u in zip(ix.instance.operators, assignment, strict=True)}
        metrics = evaluate(ix, assignment, model.bounds)
        r_ms = float(raw.values[layout.r])
    objective = ix.instance.network_objective
    return OdpResult(
        status=raw.status, placement=placement,
        response_time_ms=metrics.response_time_ms if metrics else None,
        availability=metrics.availability if metrics else None,
        network=metrics.network(objective) if metrics and objective else None,
        utility=metrics.utility if metrics else None,
        objective=raw.objective, bound=raw.bound, gap=raw.gap, r_ms=r_ms,
        solve_s=raw.solve_s, cpu_s=raw.cpu_s, build_s=build_s, size=model_size(model),
        solver=SolverName(settings.solver),
        solver_status=raw.solver_status, settings=settings, nodes=raw.nodes, lp_iterations=raw.lp_iterations,
        trace=raw.trace,
    )


__all__ = ["solve", "decode", "model_size", "Status"]
