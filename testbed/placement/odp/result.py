"""Solver settings, the adapters' raw answer, and the result a placement strategy receives."""
from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np

from testbed.placement.odp.model import ObjectiveForm, ResponseTimeForm


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (CBC runs as one): on a shared machine
    it measures the solver's effort where wall-clock time also measures the neighbours."""
    children = os.times()  # only its children fields: its own user/system tick every 10 ms
    return time.process_time() + children.children_user + children.children_system


class SolverName(str, Enum):
    HIGHS = "highs"
    CBC = "cbc"


class Status(str, Enum):
    OPTIMAL = "optimal"  # solved to the relative gap
    TIME_LIMIT = "time_limit"  # stopped by the time limit; placement is the incumbent, if any
    INFEASIBLE = "infeasible"
    ERROR = "error"  # anything else the solver reported (unbounded, numerical trouble, ...)


def solver_seed(text: str) -> int:
    """The solvers' random seed from an argument: HiGHS takes [0, 2**31 - 1]."""
    value = int(text)
    if not 0 <= value <= 2**31 - 1:
        raise ValueError(f"must be an integer in [0, 2**31 - 1], not {text}")
    return value


@dataclass(frozen=True)
class SolverSettings:
    solver: SolverName = SolverName.HIGHS
    time_limit_s: Optional[float] = None
    threads: int = 1  # deterministic, and the machine is shared
    seed: int = 1
    mip_rel_gap: float = 1e-4  # CPLEX's default
    objective_form: ObjectiveForm = ObjectiveForm.NORMALISED
    rt_form: ResponseTimeForm = ResponseTimeForm.AUTO
    max_paths: int = 10_000  # AUTO switches to potentials above this many paths
    trace: bool = False  # record incumbent and bound over time (HiGHS only)
    log: bool = False  # the solver's own log on stdout

    def __post_init__(self) -> None:
        # accept the plain strings of a config file ("cbc", "raw_r", ...) as well as the enums
        for name, kind in (("solver", SolverName), ("objective_form", ObjectiveForm), ("rt_form", ResponseTimeForm)):
            object.__setattr__(self, name, kind(getattr(self, name)))
        if self.threads < 1:
            raise ValueError(f"threads must be ≥ 1, not {self.threads}")
        if self.time_limit_s is not None and not self.time_limit_s > 0:
            raise ValueError(f"time_limit_s must be > 0, not {self.time_limit_s}")
        if not 0 <= self.mip_rel_gap < 1:
            raise ValueError(f"mip_rel_gap must lie in [0, 1), not {self.mip_rel_gap}")


@dataclass(frozen=True)
class TracePoint:
    t_s: float
    incumbent: float  # objective of the best solution so far (nan: none yet)
    bound: float
    gap: float


@dataclass(frozen=True)
class RawSolution:
    """What an adapter returns: the solver's own status, values and statistics."""

    status: Status
    solver_status: str  # the solver's wording
    values: Optional[np.ndarray]  # column values of the incumbent, None without one
    objective: Optional[float]
    bound: Optional[float]
    gap: Optional[float]
    solve_s: float  # wall clock
    cpu_s: float
    nodes: Optional[int] = None
    lp_iterations: Optional[int] = None
    trace: Tuple[TracePoint, ...] = ()


@dataclass(frozen=True)
class ModelSize:
    x: int
    y: int
    continuous: int
    constraints: int
    constraints_by_family: Mapping[str, int]
    nonzeros: int
    paths: int
    rt_form: str

    @property
    def variables(self) -> int:
        return self.x + self.y + self.continuous


@dataclass(frozen=True)
class OdpResult:
    status: Status
    placement: Optional[Mapping[str, str]]  # operator id → node id; None without a solution
    response_time_ms: Optional[float]  # computed from the placement, never from r
    availability: Optional[float]
    network: Optional[float]  # the instance's network objective's value, if it has one
    utility: Optional[float]  # F / F_net of the placement
    objective: Optional[float]  # the solver's incumbent objective (F' or r)
    bound: Optional[float]
    gap: Optional[float]
    r_ms: Optional[float]  # the model's r (equals the response time at the optimum when w_r > 0)
    solve_s: float  # wall clock of the solver run
    cpu_s: float  # CPU time of the solver run
    build_s: float
    size: ModelSize
    solver: SolverName
    solver_status: str
    settings: SolverSettings
    nodes: Optional[int] = None
    lp_iterations: Optional[int] = None
    trace: Tuple[TracePoint, ...] = field(default=())

    @property
    def has_solution(self) -> bool:
        return self.placement is not None

    def to_json(self) -> Dict[str, Any]:
        def num(v: Optional[float]) -> Optional[float]:
            return None if v is None or not math.isfinite(v) else float(v)

        settings = {k: (v.value if isinstance(v, Enum) else v) for k, v in asdict(self.settings).items()}
        return {
            "status": self.status.value,
            "solver_status": self.solver_status,
            "placement": dict(self.placement) if self.placement is not None else None,
            "response_time_ms": num(self.response_time_ms),
            "availability": num(self.availability),
            "network": num(self.network),
            "utility": num(self.utility),
            "objective": num(self.objective),
            "objective_form": self.settings.objective_form.value,
            "bound": num(self.bound),
            "gap": num(self.gap),
            "r_ms": num(self.r_ms),
            "solve_s": round(self.solve_s, 4),
            "cpu_s": round(self.cpu_s, 4),
            "build_s": round(self.build_s, 4),
            "variables": {"x": self.size.x, "y": self.size.y, "continuous": self.size.continuous,
                          "total": self.size.variables},
            "constraints": {"total": self.size.constraints, **dict(self.size.constraints_by_family)},
            "nonzeros": self.size.nonzeros,
            "paths": self.size.paths,
            "rt_form": self.size.rt_form,
            "nodes": self.nodes,
            "lp_iterations": self.lp_iterations,
            "solver": self.solver.value,
            "settings": settings,
        }
