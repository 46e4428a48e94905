"""The published evaluations the testbed knows (experiments/conf/evaluation/*.yaml), as composed
configs: what `testbed evaluations` lists and `make experiment EVAL=<name>` runs."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List

from hydra import compose, initialize_config_dir

from testbed.config import CONF_DIR, ExperimentConfig, register, to_typed


def evaluation_names(conf_dir: Path = CONF_DIR) -> List[str]:
    return sorted(p.stem for p in (conf_dir / "evaluation").glob("*.yaml"))


def load_evaluation(name: str, conf_dir: Path = CONF_DIR) -> ExperimentConfig:
    """The experiment config an evaluation composes to (its own workload, topology and profile)."""
    register()
    with initialize_config_dir(str(conf_dir), version_base="1.3"):
        return to_typed(compose("config", overrides=[f"evaluation={name}"]))


def describe(cfg: ExperimentConfig) -> str:
    ev = cfg.evaluation
    lines = [f"{ev.name}: {ev.title}",
             f"  workloads: {', '.join(ev.workloads)} (default {cfg.pattern.name}); topology {cfg.topology.name}; "
             f"profile {cfg.profile}; {cfg.reps} repetition(s) of {cfg.duration_min:g} min"]
    for c in ev.configurations:
        btu = f", BTU {c.btu_minutes} min" if c.btu_minutes is not None else ""
        placement = f", placement {c.placement}" if c.placement else ""
        params = f", {dict(c.params)}" if c.params else ""
        lines.append(f"  - {c.name}: policy {c.policy}, billing {c.billing.value}{btu}{placement}{params}")
    return "\n".join(lines)


USAGE = ("usage: testbed evaluations [NAME [workload|backend]]  (workload: print only its default workload; "
         "backend: only its backend, e.g. sim, docker or flink)")


def main(argv: List[str]) -> int:
    names = evaluation_names()
    if len(argv) > 2 or (argv and argv[0] not in names) or (len(argv) == 2 and argv[1] not in ("workload", "backend")):
        print(f"{USAGE}\nevaluations: {', '.join(names)}", file=sys.stderr)
        return 2
    if len(argv) == 2:
        cfg = load_evaluation(argv[0])
        print(cfg.pattern.name if argv[1] == "workload" else cfg.backend.name)
        return 0
    for name in argv or names:
        print(describe(load_evaluation(name)))
    return 0
