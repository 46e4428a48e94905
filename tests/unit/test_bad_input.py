"""Bad input to `testbed experiment`: one clear error naming the key or folder, exit status 2,
before any work starts and without writing anything; interrupted experiments settle every manifest;
files are written with the process's umask."""
from __future__ import annotations

import os
import random
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from testbed.config import ConfigError
from testbed.eventlog import EventLog, read_manifest
from testbed.experiment import run_experiment
from tests import guarded
from tests.conftest import compose_config

ROOT = Path(__file__).resolve().parents[2]


def experiment(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return guarded.run([sys.executable, "-m", "testbed.cli", "experiment", *args], cwd=cwd, cpu_s=600,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize("override, key", [
    ("+policies.btu.foo=1", "policies.btu.foo"),  # the + prefix Hydra suggests after a typo
    ("+foo=1", "foo"),
    ("+topology.operators.O1.service.speed=2", "topology.operators.O1.service.speed"),
    ("billing.price_per_10_minutes=-1", "billing.price_per_10_minutes"),
    ("duration_min=1e9", "duration_min"),
    ("load_scale=1e6", "load_scale"),
    ("load_scale=800", "load_scale"),  # within its own bound, but too many ticks for the run
    ("reps=100000", "reps"),
    ("backend.step_ms=20000", "backend.step_ms"),  # longer than a monitoring interval
    ("runtime.monitoring_s=9000", "runtime.monitoring_s"),  # longer than the run
    ("runtime.initial_instances=100", "runtime.initial_instances"),  # more hosts than max_hosts
    ("pattern.name=../../escape", "pattern.name"),
    ("out=", "out"),
])
def test_a_bad_value_is_named_before_anything_runs(override, key, tmp_path):
    with pytest.raises(ConfigError) as err:
        run_experiment(compose_config("reps=1", "duration_min=60", f"out={tmp_path / 'runs'}", override))
    assert err.value.key == key, str(err.value)
    assert not (tmp_path / "runs").exists() and not (tmp_path / "escape").exists()


@pytest.mark.slow
def test_the_command_gives_one_line_and_exit_status_2(tmp_path):
    (tmp_path / "afile").write_text("")
    cases = [("+policies.btu.foo=1", "policies.btu.foo"), (f"out={tmp_path / 'afile'}", "out"),
             ("load_scale=1e6", "load_scale")]
    for override, key in cases:
        proc = experiment("reps=1", "duration_min=5", f"out={tmp_path / 'runs'}", override, cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and key in proc.stderr
        assert "Traceback" not in proc.stderr
    proc = experiment("reps=three", f"out={tmp_path / 'runs'}", cwd=tmp_path)  # Hydra's own composition error
    assert proc.returncode == 2 and "reps" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_out_must_be_a_writable_folder(tmp_path):
    (tmp_path / "afile").write_text("")
    with pytest.raises(ConfigError, match="is a file"):
        run_experiment(compose_config("reps=1", "duration_min=5", f"out={tmp_path / 'afile'}"))
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o500)
    if os.geteuid() != 0:  # root may write anywhere
        with pytest.raises(ConfigError, match="not writable"):
            run_experiment(compose_config("reps=1", "duration_min=5", f"out={locked}"))


@pytest.mark.slow
def test_a_folder_with_runs_of_other_settings_is_refused_unless_mixed(tmp_path):
    out = tmp_path / "runs"
    run_experiment(compose_config("policy=btu", "reps=1", "duration_min=5", f"out={out}", "summary=false"))
    # other configurations and more repetitions of the same settings are fine
    run_experiment(compose_config("policy=threshold", "reps=2", "duration_min=5", f"out={out}", "summary=false"))
    with pytest.raises(ConfigError, match="other settings") as err:
        run_experiment(compose_config("policy=btu", "reps=1", "duration_min=6", f"out={out}", "summary=false"))
    assert err.value.key == "out"
    assert read_manifest(out / "stepwise" / "btu-60" / "1").resolved_config["duration_min"] == 5  # untouched
    run_experiment(compose_config("policy=btu", "reps=1", "duration_min=6", f"out={out}", "mix=true"))


@pytest.mark.slow
def test_a_second_experiment_into_a_locked_folder_fails_at_once(tmp_path):
    out = tmp_path / "runs"
    first = subprocess.Popen([sys.executable, "-m", "testbed.cli", "experiment", f"out={out}", "reps=3",
                              "summary=false"], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not list(out.glob("stepwise/*/*/manifest.json")) and time.monotonic() < deadline:
            time.sleep(0.1)
        with pytest.raises(ConfigError, match="another experiment"):
            run_experiment(compose_config("reps=1", "duration_min=5", f"out={out}"))
    finally:
        first.terminate()
        first.wait(timeout=60)


@pytest.mark.slow
def test_ctrl_c_of_a_two_worker_experiment_settles_every_manifest(tmp_path):
    rng = random.Random(7)
    for k in range(10):
        out = tmp_path / f"runs{k}"
        proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "experiment", f"out={out}", "workers=2",
                                 "duration_min=30"], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 120
        while not list(out.glob("stepwise/*/*/manifest.json")) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 1.5))
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground group
        proc.wait(timeout=120)
        statuses = [read_manifest(m.parent).status for m in out.glob("stepwise/*/*/manifest.json")]
        assert statuses and "running" not in statuses, (k, statuses)


def test_event_log_files_follow_the_umask(tmp_path):
    log = EventLog(tmp_path)
    path = log.write("hosts", {"t_s": [1.0], "leased": [1], "ready": [1]})
    mode = stat.S_IMODE(path.stat().st_mode)
    umask = os.umask(0)
    os.umask(umask)
    assert mode == 0o666 & ~umask


# ---- every entry point: one line naming the key or file, exit 2, no traceback, nothing written -------

CONF = Path(__file__).resolve().parent / "bad_evaluations"


@pytest.fixture
def run_main(capsys, tmp_path, monkeypatch):
    """`testbed ARGS` in this process (OUT = an unused folder below tmp_path): exit status and stderr."""
    import gc

    from testbed.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def run(*args: str):
        try:
            code = main([a.replace("OUT", str(tmp_path / "out")) for a in args])
        except SystemExit as exc:
            code = exc.code
        finally:
            gc.enable()  # `experiment` turns the collector off until its runs start
        return code, capsys.readouterr().err

    return run


def assert_one_clear_line(code, err: str, key: str, tmp_path: Path) -> None:
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and key in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args, key", [
    (("experiment", "seed=-1"), "seed"),
    (("experiment", "seed=1.5"), "seed"),
    (("experiment", "seed=abc"), "seed"),
    (("experiment", f"seed={2**63}"), "seed"),  # beyond a 64-bit column (numpy would take it)
    (("experiment", "pattern=random_walk", "pattern.seed_offset=-5"), "pattern.seed_offset"),
    (("experiment", "evaluation=nosuch"), "evaluation/nosuch"),
    (("experiment", "evaluation.only=[nosuch]"), "evaluation.only[0]"),
    (("experiment", f"hydra.searchpath=[file://{CONF}]", "evaluation=bad_runtime"),
     "evaluation.configurations[0].runtime.reasoning_s"),
    (("experiment", f"hydra.searchpath=[file://{CONF}]", "evaluation=bad_runtime_key"),
     "evaluation.configurations[0].runtime.nosuch"),
    (("experiment", "evaluation=daedalus", "job.keys=0"), "job.keys"),
    (("experiment", "evaluation=daedalus", "+job.nosuch=1"), "job.nosuch"),
    (("experiment", "evaluation=daedalus", "job.downtime_out_s=[5]"), "job.downtime_out_s"),
    (("experiment", "evaluation=odp", "backend.emulation.availability.vm2=1.5"), "backend.emulation.availability.vm2"),
    (("experiment", "evaluation=odp", "backend.emulation.delay_mean_ms=[-1,5]"), "backend.emulation.delay_mean_ms"),
    (("experiment", "evaluation=odp", "+backend.emulation.availability.host9=0.9"),
     "backend.emulation.availability.host9"),
    (("experiment", "backend=docker", "backend.live.payloads.availability.share_defect=1.5"),
     "backend.live.payloads.availability.share_defect"),
    (("experiment", "backend=docker", "backend.live.payloads.temperature.mean_excursion_ticks=0"),
     "backend.live.payloads.temperature.mean_excursion_ticks"),
    (("experiment", "evaluation=odp", "placement.odp.w_r=2"), "placement.odp.w_r"),
    (("experiment", "evaluation=odp", "placement.odp.solver=gurobi"), "placement.odp.solver"),
    (("experiment", "evaluation=odp", "placement.odp.time_limit_s=-5"), "placement.odp.time_limit_s"),
    (("sweep", "policy=btu", "pattern=stepwise,,"), "pattern"),
    (("sweep", "policy=btu", "billing.btu_minutes=range(10"), "billing.btu_minutes"),
    (("sweep", "policy=btu", "billing.btu_minutes=range(10,10)"), "billing.btu_minutes"),  # an empty grid
    (("sweep", "policy=btu", "billing.btu_minutes=choice()"), "billing.btu_minutes"),
    (("sweep", "policy=btu", "+foo=1,2"), "foo"),
    (("sweep", "policy=btu", "seed=-1,2"), "seed"),
    (("odp", "study", "seeds=0"), "seeds"),
    (("odp", "study", "foo=1"), "foo"),
    (("odp", "solve", "instance.json", "seed=-1"), "seed"),
    (("odp", "solve", "instance.json", "solver=gurobi"), "solver"),
    (("odp", "solve", "no-such-instance.json"), "no-such-instance.json"),
    (("odp", "runs", "no-such-folder"), "no-such-folder"),
    (("calibrate", "seed=-1"), "seed"),
    (("calibrate", f"seed={2**32}"), "seed"),  # optuna's sampler takes 32 bits
    (("fidelity", "seed=-1"), "seed"),
    (("report", "no-such-folder"), "no-such-folder"),
    (("report", "OUT", "spark.mastr=local"), "spark.mastr"),
])
def test_every_entry_point_gives_one_line_and_exit_2(args, key, run_main, tmp_path):
    code, err = run_main(*args, "out=OUT", "reps=1", "duration_min=1") if args[0] in ("experiment", "sweep") \
        else run_main(*args)
    assert_one_clear_line(code, err, key, tmp_path)


def test_report_of_an_empty_folder_is_a_bad_argument(run_main, tmp_path):
    (tmp_path / "empty").mkdir()
    code, err = run_main("report", str(tmp_path / "empty"))
    assert_one_clear_line(code, err, str(tmp_path / "empty"), tmp_path)
    assert list((tmp_path / "empty").iterdir()) == []


# ---- the profile commands: a shipped profile is never replaced, another file only with force=true ----

def _shipped_bytes() -> dict:
    from testbed.fidelity.profile_file import PROFILE_DIR

    return {p.name: p.read_bytes() for p in sorted(PROFILE_DIR.glob("*.yaml"))}


@pytest.fixture
def measured_runs(tmp_path):
    """A live runs folder and a Flink runs folder each profile command can measure."""
    from tests.unit.test_engine_profile import _flink_run
    from tests.unit.test_live_profile import _live_run

    _live_run(tmp_path / "live")
    _flink_run(tmp_path / "flink")
    return tmp_path


def _profile_commands(runs: Path, *args: str) -> list:
    return [("live-profile", str(runs / "live"), *args), ("engine-profile", str(runs / "flink"), *args)]


@pytest.mark.parametrize("args, key", [
    (("name=paper",), "name"),
    (("name=paper", "force=true"), "name"),
    (("name=x", "out=SHIPPED", "force=true"), "out"),
])
def test_no_profile_command_replaces_a_shipped_profile(args, key, measured_runs, run_main, tmp_path):
    from testbed.fidelity.profile_file import PROFILE_DIR

    before = _shipped_bytes()
    args = tuple(a.replace("SHIPPED", str(PROFILE_DIR / "paper.yaml")) for a in args)
    for command in _profile_commands(measured_runs, *args):
        code, err = run_main(*command)
        assert_one_clear_line(code, err, key, tmp_path)
        assert "shipped with the project" in err and "paper.yaml" in err
    assert _shipped_bytes() == before


@pytest.mark.parametrize("args", [("name=paper_calibrated",), ("name=preprint", "force=true"), ()])
def test_calibrate_never_replaces_a_shipped_profile(args, run_main, tmp_path):
    before = _shipped_bytes()
    code, err = run_main("calibrate", "budget=1", *args)  # () = the loop's own profile, paper_calibrated
    assert_one_clear_line(code, err, "name", tmp_path)
    assert "shipped with the project" in err
    assert _shipped_bytes() == before


def test_an_existing_profile_is_replaced_only_with_force(measured_runs, run_main, tmp_path):
    for command, runs in (("live-profile", "live"), ("engine-profile", "flink")):
        mine = tmp_path / f"{command}.yaml"
        mine.write_text("# the user's own\n")
        code, err = run_main(command, str(measured_runs / runs), "name=x", f"out={mine}")
        assert_one_clear_line(code, err, "out", tmp_path)
        assert "force=true" in err and mine.read_text() == "# the user's own\n"
        code, err = run_main(command, str(measured_runs / runs), "name=x", f"out={mine}", "force=true")
        assert code == 0, err
        assert mine.read_text().startswith("# @package _global_")


@pytest.mark.parametrize("out, message", [("FOLDER", "is a folder"), ("FILE/x.yaml", "is a file")])
def test_a_profile_out_that_cannot_be_a_file_is_named(out, message, measured_runs, run_main, tmp_path):
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("mine\n")
    out = out.replace("FOLDER", str(tmp_path / "folder")).replace("FILE", str(tmp_path / "file"))
    for command in _profile_commands(measured_runs, "name=x", f"out={out}"):
        code, err = run_main(*command)
        assert_one_clear_line(code, err, "out", tmp_path)
        assert message in err
    assert (tmp_path / "file").read_text() == "mine\n" and list((tmp_path / "folder").iterdir()) == []


@pytest.mark.parametrize("cores", ["inf", "nan", "-1", "0"])
def test_live_profile_cores_are_those_the_experiment_accepts(cores, measured_runs, run_main, tmp_path):
    code, err = run_main("live-profile", str(measured_runs / "live"), "name=x", f"out={tmp_path / 'x.yaml'}",
                         f"cores={cores}")
    assert_one_clear_line(code, err, "cores", tmp_path)
    assert not (tmp_path / "x.yaml").exists()


@pytest.mark.parametrize("args, key", [
    (("pattern=nosuch",), "pattern"),  # not a workload of the evaluation
    (("duration_min=1000000", "name=x"), "duration_min"),  # beyond what an experiment runs (a week)
    (("force=maybe", "name=x"), "force"),
])
def test_calibrate_checks_its_settings_before_the_search(args, key, run_main, tmp_path):
    code, err = run_main("calibrate", "budget=1", *args)
    assert_one_clear_line(code, err, key, tmp_path)


def test_calibrate_runs_its_trials_for_the_duration_given():
    from testbed.fidelity.calibration import parse_config, plan_calibration

    plan = plan_calibration(parse_config(["duration_min=7", "name=not_written"]))
    assert plan.loop.duration_min == 7 and plan.base.duration_min == 7
    assert plan.loop.calibration_setting("stepwise", "visp2017", 1, 1, {}).duration_min == 7


@pytest.mark.parametrize("args, key", [(("evaluation=nosuch",), "evaluation"),
                                       (("evaluation=presps", "sweeps=[behaviours]"), "sweeps")])
def test_fidelity_checks_its_settings_before_anything_runs(args, key, run_main, tmp_path):
    code, err = run_main("fidelity", *args, "out=OUT")
    assert_one_clear_line(code, err, key, tmp_path)


# ---- plug-ins: a module that cannot be imported, or that takes a built-in's name, is named -----------

PLUGINS = {
    "plugin_boom": 'raise RuntimeError("boom at import")\n',
    "plugin_dup_policy": '''
from dataclasses import dataclass

from testbed.policies.contract import Policy
from testbed.policies.registry import register_policy


@dataclass
class Params:
    x: int = 1


@register_policy("btu", Params)
class Mine(Policy):
    pass
''',
    "plugin_dup_placement": '''
from testbed.placement.base import register_placement


@register_placement("first_fit")
def mine(cfg):
    return None
''',
    "plugin_dup_workload": '''
from dataclasses import dataclass

from testbed.workloads.registry import PatternConfig, register_workload


@register_workload("cycle")
@dataclass
class Mine(PatternConfig):
    kind: str = "cycle"
''',
}


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """The modules above on the Python path (none of them stays imported or registered)."""
    folder = tmp_path / "plugins"
    folder.mkdir()
    for name, source in PLUGINS.items():
        (folder / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(folder))
    for variable in ("TESTBED_POLICY_MODULES", "TESTBED_PLACEMENT_MODULES", "TESTBED_WORKLOAD_MODULES"):
        monkeypatch.delenv(variable, raising=False)
    yield folder
    for name in PLUGINS:
        sys.modules.pop(name, None)


@pytest.mark.parametrize("variable", ["TESTBED_POLICY_MODULES", "TESTBED_PLACEMENT_MODULES",
                                      "TESTBED_WORKLOAD_MODULES"])
@pytest.mark.parametrize("module, error", [("no_such_plugin", "ModuleNotFoundError"),
                                           ("plugin_boom", "RuntimeError: boom at import")])
def test_a_plugin_that_cannot_be_imported_is_named(variable, module, error, plugins, monkeypatch, run_main,
                                                   tmp_path):
    monkeypatch.setenv(variable, module)
    code, err = run_main("experiment", "out=OUT", "reps=1", "duration_min=1")
    assert_one_clear_line(code, err, module, tmp_path)
    assert variable in err and error in err


@pytest.mark.parametrize("variable, module, builtin", [
    ("TESTBED_POLICY_MODULES", "plugin_dup_policy", "testbed.policies.btu"),
    ("TESTBED_PLACEMENT_MODULES", "plugin_dup_placement", "testbed.placement.first_fit"),
    ("TESTBED_WORKLOAD_MODULES", "plugin_dup_workload", "testbed.workloads.cycle"),
])
def test_a_plugin_never_replaces_a_builtin(variable, module, builtin, plugins, monkeypatch, run_main, tmp_path):
    monkeypatch.setenv(variable, module)
    code, err = run_main("experiment", "out=OUT", "reps=1", "duration_min=1")
    assert_one_clear_line(code, err, module, tmp_path)
    assert f"built-in module {builtin}" in err and "registered already" in err
    from testbed.placement.base import placements
    from testbed.policies.registry import policies
    from testbed.workloads.registry import workload_kinds

    monkeypatch.delenv(variable)
    assert policies()["btu"].cls.__module__ == "testbed.policies.btu"  # the built-ins stay
    assert placements()["first_fit"].__module__ == "testbed.placement.first_fit"
    assert workload_kinds()["cycle"].__module__ == "testbed.workloads.cycle"


def test_an_entry_point_naming_a_missing_module_is_named(plugins, monkeypatch, run_main, tmp_path):
    from testbed import discovery

    info = plugins / "mine-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mine\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[testbed.policies]\nmine = no_such_plugin_module\n")
    monkeypatch.setattr(discovery, "_entry_points", {})  # read once per process
    code, err = run_main("experiment", "out=OUT", "reps=1", "duration_min=1")
    assert_one_clear_line(code, err, "no_such_plugin_module", tmp_path)
    assert "entry point mine = no_such_plugin_module (group testbed.policies, distribution mine)" in err


def test_a_value_the_profile_sets_is_blamed_on_the_profile(run_main, tmp_path):
    code, err = run_main("experiment", "evaluation=daedalus", "profile=live_measured", "out=OUT", "reps=1",
                         "duration_min=1")
    assert_one_clear_line(code, err, "backend.shared_cores", tmp_path)
    assert "profile live_measured sets it to 2.0 (experiments/conf/profile/live_measured.yaml)" in err
    assert "job mode's simulator" in err  # why it conflicts
    # the user's own value is the user's: no profile named
    code, err = run_main("experiment", "evaluation=daedalus", "backend.shared_cores=3", "out=OUT", "reps=1",
                         "duration_min=1")
    assert_one_clear_line(code, err, "backend.shared_cores", tmp_path)
    assert "profile" not in err


@pytest.mark.parametrize("where", ["stepwise", "stepwise/btu-60", "stepwise/btu-60/1"])
def test_a_users_file_where_a_run_folder_goes_is_named_and_kept(where, run_main, tmp_path):
    out = tmp_path / "runs"
    (out / where).parent.mkdir(parents=True, exist_ok=True)
    (out / where).write_text("the user's\n")
    code, err = run_main("experiment", f"out={out}", "policy=btu", "reps=1", "duration_min=1")
    assert_one_clear_line(code, err, str(out / where), tmp_path)
    assert "is a file" in err and (out / where).read_text() == "the user's\n"
    assert sorted(p.name for p in out.iterdir()) == ["stepwise"]  # not even the lock file


def _flink_named(run: Path) -> Path:
    """A report fixture's run as a Flink run of the Daedalus evaluation (its manifest only)."""
    from testbed.eventlog import write_manifest

    m = read_manifest(run)
    m.experiment, m.backend = "daedalus_flink", "flink"
    write_manifest(run, m)
    return run


def test_report_over_flink_runs_without_their_tables_fails_before_spark(run_main, tmp_path):
    from tests.unit.report_fixtures import make_run

    runs = tmp_path / "runs"
    first = _flink_named(make_run(runs, config="daedalus-flink", rep=1))  # a job run's latency table is missing
    _flink_named(make_run(runs, config="daedalus-flink", rep=2))
    (runs / "stepwise" / "daedalus-flink" / "2" / "samples.parquet").unlink()
    start = time.perf_counter()
    code, err = run_main("report", str(runs))
    assert_one_clear_line(code, err, str(first / "latency.parquet"), tmp_path)
    assert "2 damaged" in err and time.perf_counter() - start < 5  # no JVM was started
    assert not (runs / "report").exists()


def test_summary_leaves_a_damaged_run_out_as_the_report_does(run_main, tmp_path):
    from tests.unit.report_fixtures import make_run

    runs = tmp_path / "runs"
    make_run(runs, rep=1)
    bad = make_run(runs, rep=2)
    data = (bad / "samples.parquet").read_bytes()
    (bad / "samples.parquet").write_bytes(data[: len(data) // 2])  # truncated
    code, err = run_main("summary", str(runs))
    assert code == 3 and "Traceback" not in err
    assert err.strip().splitlines() == [err.strip()] and str(bad) in err and "samples.parquet" in err
    summary = pd.read_csv(runs / "summary.csv")
    assert set(summary["config"]) == {"threshold"} and set(summary["n"]) <= {0, 1}  # the readable run only
    (runs / "summary.csv").unlink()
    (runs / "stepwise" / "threshold" / "1" / "leases.parquet").unlink()  # now none is readable
    code, err = run_main("summary", str(runs))
    assert_one_clear_line(code, err, "leases.parquet", tmp_path)
    assert "2 damaged" in err and not (runs / "summary.csv").exists()


def test_calibrate_keeps_an_existing_record_without_force(run_main, tmp_path):
    records = tmp_path / "records"
    records.mkdir()
    (records / "mine.record.json").write_text("{}\n")
    code, err = run_main("calibrate", "budget=1", "name=mine", f"record_dir={records}")
    assert_one_clear_line(code, err, "name", tmp_path)
    assert "mine.record.json exists" in err and (records / "mine.record.json").read_text() == "{}\n"


def test_only_the_projects_tracked_files_are_shipped(tmp_path):
    import uuid

    from testbed.eventlog import PROJECT_DIR
    from testbed.fidelity.profile_file import PROFILE_DIR, shipped

    assert shipped(PROFILE_DIR / "paper.yaml") and shipped(PROFILE_DIR / "live_measured.yaml")
    assert not shipped(tmp_path / "paper.yaml")
    untracked = PROJECT_DIR / f".untracked-{uuid.uuid4().hex}.yaml"  # a user's file inside the checkout
    untracked.write_text("mine\n")
    try:
        assert not shipped(untracked)
    finally:
        untracked.unlink()
