"""The `testbed` command.

    testbed experiment [OVERRIDES...]   run an experiment (Hydra: key=value overrides, -m for sweeps)
    testbed sweep [OVERRIDES...]         an evaluation over a grid of overrides (resumable; executor=local|spark)
    testbed evaluations                  the published evaluations (evaluation=<name>) and their configurations
    testbed patterns plot [PNG] [MINUTES] plot every configured arrival pattern (the paper's Fig. 7)
    testbed summary RUNS_DIR             the summary table of the runs below a folder
    testbed provider run [OVERRIDES...]  run the data provider (e.g. pattern=stepwise duration=10m transport=rabbitmq)
    testbed report RUNS_DIR [key=value]  the PySpark report (tables, figures, index.html, report.md)
    testbed calibrate [key=value...]     fit the simulator's unknowns to one pattern's published table (a profile)
    testbed fidelity [key=value...]      a profile on every pattern, plus sensitivity sweeps for the report
    testbed engine-profile RUNS_DIR name=NAME  a job-mode profile measured from the Flink runs of a folder
    testbed live-profile RUNS_DIR... name=NAME a simulator profile measured from the live runs of folders
    testbed odp solve|study [key=value...] ODP: solve a placement ILP (INSTANCE.json), or the scalability study
"""
from __future__ import annotations

import gc
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

from testbed.messages import one_line

if TYPE_CHECKING:
    from omegaconf import DictConfig

# Commands import what they need when they run (Hydra, the config schema, numpy, ...), after `main`
# has set up the process (the collector's thresholds among it).

USAGE = __doc__ or ""


def _experiment(cfg: DictConfig) -> None:
    from testbed.config import ConfigError, to_typed, validate
    from testbed.experiment import run_experiment

    global _COMPOSED
    _COMPOSED = True
    try:
        typed = validate(to_typed(cfg))
        gc.freeze()  # never to be rescanned
        gc.enable()
        runs = run_experiment(typed)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted: the runs in progress are marked incomplete", file=sys.stderr)
        sys.exit(130)
    from testbed.experiment import incomplete_runs

    incomplete = incomplete_runs(runs)
    for path, reason in incomplete:
        print(f"incomplete: {path}: {reason}", file=sys.stderr)
    if incomplete:
        sys.exit(1)
    if typed.summary and runs:
        root = Path(typed.out) / typed.pattern.name
        print(f"evaluation {typed.evaluation.name}, workload {typed.pattern.name}, profile {typed.profile}")
        if typed.job.enabled:  # job mode (Daedalus): its own metrics (reporting/evaluations/daedalus/)
            from reporting.evaluations.daedalus.text import format_results, results, runs_table

            table = results(runs_table(root))
            print(format_results(table))
            table.to_csv(root / "results.csv", index=False)
            return
        from reporting.summary import SummaryError, format_summary, summarise  # only when a table is printed

        try:
            table = summarise(root)
        except SummaryError as exc:
            print(f"summary: {exc}", file=sys.stderr)
            sys.exit(1)
        print(format_summary(table))
        table.to_csv(root / "summary.csv", index=False)


_COMPOSED = False  # set once Hydra has composed the config: a later exit is the experiment's own


def experiment(argv: List[str]) -> int:
    # Start-up (imports, the composed config) allocates what lives to the end: no collections until
    # the runs begin (`_experiment` freezes it and turns the collector on)
    gc.disable()
    import hydra

    from testbed.config import CONF_DIR, register

    register()
    if not any(arg.startswith("-") for arg in argv):
        return _experiment_once(argv)
    main = hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")(_experiment)
    sys.argv = ["testbed experiment", *argv]
    try:
        main()
    except SystemExit as exc:
        if exc.code == 1 and not _COMPOSED:  # Hydra could not compose the overrides (it printed why)
            sys.exit(2)
        raise
    return 0


def _experiment_once(overrides: List[str]) -> int:
    """A single run of `key=value` overrides, composed once: `hydra.main` composes the whole tree a
    second time only to read `hydra.mode`, half a second of a short run's process start. The result
    is the same (config.yaml turns Hydra's logging and output folder off); `-m`, `--cfg` and the
    other Hydra flags take the `hydra.main` path."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    from testbed.config import CONF_DIR

    global _COMPOSED
    try:
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            cfg = compose("config", overrides=overrides)
    except HydraException as exc:  # as hydra.main reports a bad override, with our exit code
        print(f"Error: {one_line(exc, limit=None)}", file=sys.stderr)
        sys.exit(2)
    _COMPOSED = True
    _experiment(cfg)
    return 0


def patterns(argv: List[str]) -> int:
    from omegaconf import OmegaConf

    from testbed.config import CONF_DIR
    from testbed.experiment import build_pattern
    from testbed.workloads.patterns import PatternConfig, PatternError, pattern_node, plot_patterns, validate_pattern

    if not argv or argv[0] != "plot":
        print("usage: testbed patterns plot [PNG] [MINUTES]", file=sys.stderr)
        return 2
    out = Path(argv[1]) if len(argv) > 1 else Path("patterns.png")
    minutes = float(argv[2]) if len(argv) > 2 else 120.0
    built = []
    for path in sorted((CONF_DIR / "pattern").glob("*.yaml")):
        cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(pattern_node()), OmegaConf.load(path)))
        assert isinstance(cfg, PatternConfig)  # to_object of a structured config: the dataclass
        try:
            settings = validate_pattern(cfg)
        except PatternError as exc:  # a preset that needs the user's input, e.g. a trace's file
            print(f"skipped {cfg.name}: pattern.{exc}", file=sys.stderr)
            continue
        if settings.counts_machines:  # event rates are no machine counts (the PRESPS report plots them)
            built.append(build_pattern(settings, seed=1))
    print(plot_patterns(built, minutes * 60.0, out))
    return 0


def summary(argv: List[str]) -> int:
    from reporting.summary import main as summary_main

    return summary_main(argv)


def report(argv: List[str]) -> int:
    from reporting.report import main as report_main

    return report_main(argv)


def provider(argv: List[str]) -> int:
    from data_provider.provider import main as provider_main

    return provider_main(argv)


def calibrate(argv: List[str]) -> int:
    from testbed.fidelity.calibration import main as calibrate_main

    return calibrate_main(argv)


def fidelity(argv: List[str]) -> int:
    from testbed.fidelity.validation import main as fidelity_main

    return fidelity_main(argv)


def engine_profile(argv: List[str]) -> int:
    from testbed.fidelity.engine_profile import main as engine_profile_main

    return engine_profile_main(argv)


def live_profile(argv: List[str]) -> int:
    from testbed.fidelity.live_profile import main as live_profile_main

    return live_profile_main(argv)


def odp(argv: List[str]) -> int:
    if argv[:1] == ["runs"]:  # the measures of runs are the ODP evaluation's (reporting), not placement's
        from reporting.evaluations.odp.runs import main as runs_main

        return runs_main(argv[1:])
    if argv[:1] == ["study"]:  # a command over the solver, not part of placement
        from testbed.odp_study.cli import main as study_main

        return study_main(argv[1:])
    from testbed.placement.odp.cli import main as odp_main

    return odp_main(argv)


def sweep(argv: List[str]) -> int:
    from testbed.sweep import main as sweep_main

    return sweep_main(argv)


def evaluations(argv: List[str]) -> int:
    from testbed.evaluations import main as evaluations_main

    return evaluations_main(argv)


COMMANDS = {"experiment": experiment, "evaluations": evaluations, "patterns": patterns, "summary": summary,
            "report": report,
            "provider": provider, "calibrate": calibrate, "fidelity": fidelity}
COMMANDS["odp"] = odp
COMMANDS["sweep"] = sweep
COMMANDS["engine-profile"] = engine_profile
COMMANDS["live-profile"] = live_profile


def main(argv: Optional[List[str]] = None) -> int:
    # Ctrl-C (SIGINT) interrupts a command even when its shell started it in the background, where
    # SIGINT comes ignored and Python would keep ignoring it: runs are then marked incomplete and
    # live containers removed, as in the foreground
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # Nearly everything a command allocates lives to its end (modules, compiled code, the config,
    # the run's tables): full collections ten times rarer than with Python's default thresholds
    # (700, 10, 10), which rescanned that heap three times in a simulated run (0.13 s of its 2 s)
    # for a few MB of cycles; the young generations as they were
    gc.set_threshold(700, 10, 100)
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in COMMANDS:
        print(USAGE, file=sys.stderr)
        return 2
    from testbed.discovery import PluginError

    try:
        return COMMANDS[args[0]](args[1:])
    except PluginError as exc:  # a policy, placement or workload module named by the user
        # (OmegaConf, when it wraps the error, appends its own lines: the first is ours)
        print(f"plug-in error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
