"""`testbed odp study`: solve every instance of a grid, write results.csv, trace.csv, machine.json,
the figures and summary.md (paper §7.3's claims O8-O12 as holds / does not hold).

Rows are appended as instances finish, and a rerun into the same folder skips the runs already there
(same instance and settings), so the full grid can be run in pieces.
"""
from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pandas as pd

from testbed.arguments import as_bool, count, positive
from testbed.odp_study.generator import table2_instance
from testbed.odp_study.grid import GRIDS, Grid, Point, points
from testbed.placement.odp.indexed import index
from testbed.placement.odp.metrics import bounds
from testbed.placement.odp.result import SolverName, SolverSettings, solver_seed
from testbed.placement.odp.solve import solve

RESULTS = "results.csv"
TRACE = "trace.csv"


def _grid(name: str) -> Grid:
    if name not in GRIDS:
        raise ValueError(f"one of {', '.join(GRIDS)}, not {name!r}")
    return GRIDS[name]


STUDY_KEYS: Dict[str, Callable[[str], object]] = {
    "grid": _grid, "out": Path, "time_limit_s": positive, "trace_limit_s": positive, "seed": solver_seed,
    "solver": SolverName, "threads": count, "resume": as_bool, "seeds": count, "sampling_seeds": count,
}


@dataclass(frozen=True)
class StudyConfig:
    grid: Grid
    out: Path
    seed: int = 1
    solver: SolverName = SolverName.HIGHS
    threads: int = 1
    time_limit_s: Optional[float] = None  # overrides the grid's per-instance limit
    trace_limit_s: Optional[float] = None
    resume: bool = True

    def settings(self, point: Point) -> SolverSettings:
        limit = (self.trace_limit_s or self.grid.trace_limit_s) if point.trace else \
            (self.time_limit_s or self.grid.time_limit_s)
        return SolverSettings(solver=self.solver, time_limit_s=limit, threads=self.threads, seed=self.seed,
                              trace=point.trace)


def run_id(point: Point, settings: SolverSettings) -> str:
    kind = "trace" if point.trace else "solve"
    return (f"{point.instance_id}-{kind}-{settings.solver.value}-t{settings.threads}"
            f"-l{settings.time_limit_s:g}-g{settings.mip_rel_gap:g}")


def solve_point(point: Point, settings: SolverSettings) -> tuple:
    """One solve → (results row, trace rows)."""
    inst = table2_instance(point.params)
    b = bounds(index(inst))
    res = solve(inst, settings)
    p = point.params
    rid = run_id(point, settings)
    row = {
        "run_id": rid, "instance_id": point.instance_id, "experiments": ";".join(point.experiments),
        "topo": p.topology.value, "n_ops": p.n_ops, "n_nodes": p.n_nodes, "C_u": p.c_node,
        "cand_frac": p.candidate_fraction, "seed": p.seed, "solver": settings.solver.value,
        "threads": settings.threads, "objective_form": settings.objective_form.value,
        "mip_rel_gap": settings.mip_rel_gap, "time_limit_s": settings.time_limit_s,
        "status": res.status.value, "obj": res.objective, "bound": res.bound, "gap": res.gap,
        "r_ms": res.r_ms, "response_time_ms": res.response_time_ms,
        "r_min_ms": b.r_min, "r_max_ms": b.r_max, "time_s": res.solve_s, "cpu_s": res.cpu_s,
        "build_s": res.build_s,
        "nx": res.size.x, "ny": res.size.y, "n_paths": res.size.paths, "constraints": res.size.constraints,
        "bb_nodes": res.nodes, "lp_iterations": res.lp_iterations,
    }
    trace = [{"run_id": rid, "topo": p.topology.value, "t_s": t.t_s, "incumbent": t.incumbent,
              "bound": t.bound, "gap": t.gap} for t in res.trace]
    return row, trace


def machine_info() -> Dict[str, object]:
    import highspy
    import pulp

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
        "highs": highspy.Highs().version(), "pulp": pulp.__version__,
        "load_average_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }


def run_study(cfg: StudyConfig, progress: Callable[[str], None] = lambda s: print(s, file=sys.stderr)) -> Path:
    from testbed.odp_study.report import write_report

    cfg.out.mkdir(parents=True, exist_ok=True)
    results_path, trace_path = cfg.out / RESULTS, cfg.out / TRACE
    done = set()
    if cfg.resume and results_path.exists():
        done = set(pd.read_csv(results_path)["run_id"])
    else:
        for path in (results_path, trace_path):
            path.unlink(missing_ok=True)
    machine = machine_info()
    started = time.perf_counter()
    todo = points(cfg.grid, cfg.seed)
    for k, point in enumerate(todo, 1):
        settings = cfg.settings(point)
        if run_id(point, settings) in done:
            continue
        row, trace = solve_point(point, settings)
        _append(results_path, [row])
        if trace:
            _append(trace_path, trace)
        progress(f"[{k}/{len(todo)}] {row['instance_id']:<28} {row['status']:<10} {row['time_s']:8.3f} s "
                 f"gap {_fmt(row['gap'])} ({row['experiments']})")
    machine["load_average_1m_end"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    machine["study_wall_s"] = round(time.perf_counter() - started, 1)
    machine["grid"] = cfg.grid.name
    (cfg.out / "machine.json").write_text(json.dumps(machine, indent=2))
    return write_report(cfg.out, cfg.grid)


def _append(path: Path, rows: List[dict]) -> None:
    # rewritten whole (a few hundred rows at most) so that a resumed folder written by an older
    # version with other columns stays one consistent table
    new = pd.DataFrame(rows)
    table = pd.concat([pd.read_csv(path), new], ignore_index=True) if path.exists() else new
    table.to_csv(path, index=False)


def _fmt(value: Optional[float]) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4f}"


def run_study_command(opts: Dict[str, Any]) -> int:  # the parsed command-line options
    grid = opts.get("grid", GRIDS["reduced"])
    overrides = {k: opts[k] for k in ("seeds", "sampling_seeds") if k in opts}
    grid = replace(grid, **overrides) if overrides else grid
    cfg = StudyConfig(
        grid=grid, out=Path(opts.get("out", Path("runs") / "odp-study" / grid.name)),
        seed=int(opts.get("seed", 1)), solver=opts.get("solver", SolverName.HIGHS),
        threads=int(opts.get("threads", 1)), time_limit_s=opts.get("time_limit_s"),
        trace_limit_s=opts.get("trace_limit_s"), resume=bool(opts.get("resume", True)),
    )
    summary = run_study(cfg)
    print(summary.read_text())
    print(f"written: {summary}")
    return 0


__all__ = ["StudyConfig", "run_study", "STUDY_KEYS", "run_study_command"]
