"""`testbed odp solve INSTANCE.json [key=value...]`: one placement ILP solved, its result as JSON."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional

from testbed.arguments import UsageError, as_bool, count, parse_pairs, positive
from testbed.placement.odp.instance import InstanceError, load_instance
from testbed.placement.odp.model import ObjectiveForm, ResponseTimeForm
from testbed.placement.odp.result import SolverName, SolverSettings, solver_seed

USAGE = """usage:
  testbed odp solve INSTANCE.json [solver=highs|cbc] [time_limit_s=S] [threads=1] [seed=1]
                                  [mip_rel_gap=1e-4] [objective=normalised|raw_r]
                                  [rt_form=auto|paths|potentials] [log=false]
  testbed odp study [grid=reduced|full] [out=DIR] [time_limit_s=S] [trace_limit_s=S] [seed=1] [seeds=N]
                    [sampling_seeds=N] [solver=highs|cbc] [threads=1] [resume=true]
  testbed odp runs RUNS_DIR [warmup_s=60] [after_s=200]   measures of the odp / odp_heuristics runs"""


SOLVE_KEYS: Dict[str, Callable[[str], object]] = {
    "solver": SolverName, "time_limit_s": positive, "threads": count, "seed": solver_seed, "mip_rel_gap": float,
    "objective": ObjectiveForm, "rt_form": ResponseTimeForm, "log": as_bool,
}


def solve_command(argv: List[str]) -> int:
    from testbed.placement.odp.solve import solve

    if not argv or "=" in argv[0]:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        opts = parse_pairs(argv[1:], SOLVE_KEYS)
        if "objective" in opts:
            opts["objective_form"] = opts.pop("objective")
        settings = SolverSettings(**opts)  # type: ignore[arg-type]
        instance = load_instance(Path(argv[0]))
    except (UsageError, InstanceError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: {argv[0]}: {exc.strerror}", file=sys.stderr)
        return 2
    try:
        result = solve(instance, settings)
    except ValueError as exc:  # e.g. raw_r with availability weights
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result.to_json(), indent=2))
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    commands = {"solve": solve_command}
    if not args or args[0] not in commands:
        print(USAGE, file=sys.stderr)
        return 2
    return commands[args[0]](args[1:])


if __name__ == "__main__":
    sys.exit(main())
