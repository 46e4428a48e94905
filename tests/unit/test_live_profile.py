"""A simulator profile measured from live runs (testbed/fidelity/live_profile.py), on a small live runs
folder written with the event log's own writer: known service times, output ratios, quiet and
queued intervals, scale-ups and leases with known delays."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pandas as pd
import pytest
import yaml
from omegaconf import OmegaConf

from testbed.arguments import ConfigError
from testbed.cli import main as cli_main
from testbed.eventlog import EventLog, Manifest, run_dir_for, write_manifest
from testbed.fidelity import live_profile as lp
from testbed.fidelity.profile_file import PROFILE_DIR
from tests.conftest import compose_config

STEP = 15.0
T = [STEP * k for k in range(1, 21)]  # 20 monitoring intervals
HOP_MS = 20.0
LEASE_DELAY_S = 40.0
QUEUED = {10, 11, 12}  # interval indices whose O1 queue is not empty
OPERATORS = {"O1": {"ratio_in": 1, "ratio_out": 1, "downstream": ["O3"]},
             "O2": {"ratio_in": 50, "ratio_out": 1, "downstream": ["O8"]},
             "O3": {"ratio_in": 1, "ratio_out": 1, "downstream": []},
             "O8": {"ratio_in": 1, "ratio_out": 0, "downstream": []}}


def _o1_ms(k: int) -> float:
    return 39.0 if k % 2 else 41.0  # mean 40, per-interval sd 1 over 100 items: per-item sd 10


def _tables(measurement: str) -> Dict[str, Dict[str, List[Any]]]:
    trunc = lp.TRUNCATION_MEAN_MS if measurement == "seconds_truncated" else 0.0
    stats: Dict[str, List[Any]] = {"t_s": [], "operator": [], "instance": [], "processed": [], "utilisation": []}
    samples: Dict[str, List[Any]] = {"t_s": [], "operator": [], "instance": [], "duration_ms": []}
    queues: Dict[str, List[Any]] = {"t_s": [], "operator": [], "depth": []}
    edges: Dict[str, List[Any]] = {"t_s": [], "source": [], "target": [], "items": []}

    def stat(t: float, op: str, inst: str, n: int, ms: float) -> None:
        for c, v in zip(stats, (t, op, inst, n, n * ms / (STEP * 1000.0)), strict=True):
            stats[c].append(v)

    def sample(t: float, op: str, inst: str, ms: float) -> None:
        for c, v in zip(samples, (t, op, inst, ms + trunc), strict=True):
            samples[c].append(v)

    for k, t in enumerate(T):
        stat(t, "O1", "o1-a", 100, _o1_ms(k))
        stat(t, "O2", "o2-a", 600, 10.0)
        stat(t, "O3", "o3-a", 100, 20.0)
        if t >= 120:
            stat(t, "O3", "o3-b", 0, 0.0)
        sample(t - 5, "O1", "o1-a", 5000.0 if k in QUEUED else 40.0 + HOP_MS)
        sample(t - 5, "O3", "o3-a", 20.0 + HOP_MS)
        for op, depth in (("O1", 50 if k in QUEUED else 0), ("O3", 0)):
            for c, v in zip(queues, (t, op, depth), strict=True):
                queues[c].append(v)
        for src, dst, n in (("S2", "O1", 100), ("O1", "O3", 100), ("S1", "O2", 600), ("O2", "O8", 1)):
            for c, v in zip(edges, (t, src, dst, n), strict=True):
                edges[c].append(v)
    # vm1 from the start; vm2 leased at 100, released at 250; vm3 leased at 130: both ready 40 s later
    leases = [("vm1", 0.0, 300.0, False), ("vm2", 100.0, 250.0, True), ("vm3", 130.0, 300.0, False)]
    hosts: Dict[str, List[Any]] = {"t_s": T, "leased": [], "ready": []}
    for t in T:
        alive = [(s, e, r) for _, s, e, r in leases if s <= t and not (r and e <= t)]
        hosts["leased"].append(len(alive))
        hosts["ready"].append(sum(1 for s, _, _ in alive if s == 0 or s + LEASE_DELAY_S <= t))
    none = [None]
    return {
        "instance_stats": stats, "samples": samples, "queues": queues, "edges": edges, "hosts": hosts,
        "leases": {"host": [h for h, *_ in leases], "start_s": [s for _, s, _, _ in leases],
                   "end_s": [e for _, _, e, _ in leases], "btu_s": [600.0] * 3, "paid_btus": [1] * 3,
                   "prolongations": [0] * 3, "released": [r for *_, r in leases]},
        "placements": {"t_s": [100.0], "action": ["scale_up"], "operator": ["O3"], "instance": ["o3-b"],
                       "host": ["vm2"], "reason": ["test"], "solve": none, "solver_status": none,
                       "objective": none, "gap": none, "solve_s": none, "solve_cpu_s": none},
    }


def _cpu_table(stats: Dict[str, List[Any]], cpu_share: float,
               delay_share: float | None = None) -> Dict[str, List[Any]]:
    """instance_cpu beside instance_stats: CPU time = cpu_share x busy wall time, run-queue delay =
    delay_share x busy wall time (None: an image that did not report it), the rest waiting for I/O."""
    busy = [u * STEP * 1000.0 for u in stats["utilisation"]]
    return {"t_s": stats["t_s"], "operator": stats["operator"], "instance": stats["instance"], "busy_ms": busy,
            "cpu_ms": [b * cpu_share for b in busy],
            "run_delay_ms": [None if delay_share is None else b * delay_share for b in busy],
            "container_cpu_ms": [b * cpu_share + 5.0 for b in busy]}


def _live_run(root: Path, config: str = "btu-10-live", measurement: str = "milliseconds",
              status: str = "complete", details: Dict[str, Any] | None = None, profile: str = "",
              cpu_share: float | None = None, rep: int = 1, delay_share: float | None = None) -> Path:
    run_dir = run_dir_for(root, "stepwise", config, rep)
    log = EventLog(run_dir)
    for name, cols in _tables(measurement).items():
        log.write(name, cols)
    if cpu_share is not None:
        log.write("instance_cpu", _cpu_table(_tables(measurement)["instance_stats"], cpu_share, delay_share))
    if details is None:
        details = {"instances": [{"requested_at": 0.0, "container_start_s": 1.0, "start_latency_s": 1.0},
                                 {"requested_at": 100.0, "container_start_s": 3.0, "start_latency_s": 43.0},
                                 {"requested_at": 200.0, "container_start_s": 5.0, "start_latency_s": 5.0}]}
    cfg = {"duration_min": 5.0, "load_scale": 1.0, **({"profile": profile} if profile else {}),
           "runtime": {"measurement": measurement, "sampling": "every", "sample_every": 10, "initial_instances": 1,
                       "monitoring_s": STEP},
           "backend": {"live": {"parallel": 1, "emulate_pull": True, "work_ms": {}}},
           "infrastructure": {"container_start_s": [6.05, 12.1], "lease_delay_s": [23.9, 47.7], "pull_mb_per_s": 5.0},
           "topology": {"operators": OPERATORS}}
    write_manifest(run_dir, Manifest(
        run_id=f"stepwise/{config}/{rep}", experiment="btu", pattern="stepwise", config=config, policy="btu",
        btu_minutes=10, rep=rep, seed=1, seeds={}, backend="docker" if config.endswith("-live") else "sim",
        resolved_config=cfg, code_revision="test",
        versions={}, status=status, details=details))
    return run_dir


def test_every_value_is_measured_from_the_event_log(tmp_path):
    _live_run(tmp_path)
    m = lp.measure(tmp_path, cores=4)
    o1, o3 = m.service["O1"], m.service["O3"]
    assert o1.mean_ms == pytest.approx(40.0) and o1.items == 2000 and o1.intervals == 20
    # neighbours differ by 2 ms over 100 items each: z^2 = 4 / 0.02 = 200, every pair alike
    assert o1.cv == pytest.approx(math.sqrt(200 / lp.CHI2_1_MEDIAN) / 40.0) and o1.pairs == 19
    assert o1.spread_cv == pytest.approx(10.0 / 40.0)  # sd of the interval means (1 ms) x sqrt(100 items)
    assert o3.mean_ms == pytest.approx(20.0) and o3.cv == pytest.approx(0.0, abs=1e-9)
    assert m.service["O2"].mean_ms == pytest.approx(10.0)
    assert m.emission["O2"].in_per_out == 600 and m.emission["O1"].out_per_in == 1.0
    # not the first interval (its start unknown), nor O1's queued ones and the one after them
    assert m.hop_by_operator["O1"].size == 19 - 4 and m.hop_by_operator["O3"].size == 19
    assert m.source_fed == ["O1", "O2"] and m.hop_ms.size == 19  # a tick's burst queues behind itself: O3 only
    assert m.hop_latency_ms == pytest.approx(HOP_MS)
    assert m.container_start_s.tolist() == [3.0, 5.0]  # the initial deployment is not a scale-up
    assert m.start_latency_s.tolist() == [43.0, 5.0] and m.request_to_report_s.tolist() == [20.0]
    assert m.lease_delay_s == pytest.approx([LEASE_DELAY_S + 2.5, LEASE_DELAY_S + 2.5])  # midpoint of the interval
    busy = 100 * 40 / 15000 + 600 * 10 / 15000 + 100 * 20 / 15000
    assert np.mean(m.busy_cores) == pytest.approx(busy)
    v = lp.profile_values(m)
    assert v["backend.hop_latency_ms"] == HOP_MS and v["backend.shared_cores"] == 4
    assert v["infrastructure.container_start_s"] == [3.0, 5.0]
    assert v["topology.operators.O1.service.mean_ms"] == 40 and v["topology.operators.O1.service.cv"] == round(o1.cv, 3)
    assert v["topology.operators.O1.service.parallel"] == 1
    assert v["topology.operators.O2.emission"] == {"sim": "incident", "live": "incident", "items_per_incident": 600}
    assert v["runtime.measurement"] == "milliseconds" and v["runtime.initial_instances"] == 1
    assert not any(k.startswith("topology.operators.O8.") for k in v)  # no work measured: the base's stays


def test_without_uncontended_intervals_every_interval_counts(tmp_path):
    _live_run(tmp_path)
    m = lp.measure(tmp_path, cores=0.5)  # 0.8 busy cores in every interval
    o1 = m.service["O1"]
    assert not o1.uncontended and o1.intervals == 20 and o1.mean_ms == pytest.approx(40.0)
    assert lp.measure(tmp_path, cores=1).service["O1"].uncontended


def test_truncated_send_times_are_corrected_by_their_mean(tmp_path):
    _live_run(tmp_path, measurement="seconds_truncated")
    m = lp.measure(tmp_path)
    assert m.hop_latency_ms == pytest.approx(HOP_MS)
    assert m.cores > 0 and "os.cpu_count" in m.cores_source


@pytest.mark.parametrize("details", [{"engine_cpus": 6},
                                     {"engines": [{"url": "unix:///var/run/docker.sock", "cpus": 6}]}])
def test_the_engines_cpu_count_is_taken_from_the_manifest(tmp_path, details):
    _live_run(tmp_path, details=details)  # the live run records its engines' CPU counts
    m = lp.measure(tmp_path)
    assert m.cores == 6 and "manifest" in m.cores_source
    v = lp.profile_values(m)
    assert "infrastructure.container_start_s" not in v  # no instance records: not measured
    assert "not measured: key left out" in "\n".join(lp.header(m, "x"))


def test_the_cli_writes_a_hydra_profile_with_its_sources(tmp_path, capsys):
    _live_run(tmp_path / "runs")
    _live_run(tmp_path / "runs", config="btu-10")  # a simulated run beside it is not measured
    out = tmp_path / "live_measured.yaml"
    assert cli_main(["live-profile", str(tmp_path / "runs"), "name=live_measured", f"out={out}", "cores=2"]) == 0
    text = out.read_text()
    assert text.startswith("# @package _global_\n")
    assert "1 complete run(s)" in text and "copied, not measured" in text and "busy cores per interval" in text
    data = OmegaConf.create(yaml.safe_load(text))
    assert data.profile == "live_measured" and data.backend.shared_cores == 2
    assert data.backend.hop_latency_ms == HOP_MS and data.infrastructure.lease_delay_s == [42.5, 42.5]
    assert data.topology.operators.O2.emission.items_per_incident == 600
    assert data.topology.operators.O3.service.mean_ms == 20 and data.runtime.sample_every == 10


@pytest.mark.parametrize("setup, message", [
    (lambda root: None, "no complete live runs"),
    (lambda root: _live_run(root, config="btu-10"), "no complete live runs"),
    (lambda root: _live_run(root, status="incomplete"), "no complete live runs"),
    (lambda root: (_live_run(root) / "edges.parquet").unlink(), "no edges table"),
])
def test_input_without_live_figures_fails_with_one_line_and_status_2(tmp_path, capsys, setup, message):
    (tmp_path / "runs").mkdir()
    setup(tmp_path / "runs")
    assert cli_main(["live-profile", str(tmp_path / "runs"), "name=x", f"out={tmp_path / 'x.yaml'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
    assert not (tmp_path / "x.yaml").exists()


@pytest.mark.parametrize("args", [[], ["runs"], ["runs", "name=a-b"], ["runs", "name=a", "speed=2"],
                                  ["runs", "name=a", "cores=0"], ["runs", "name=a", "cores=x"],
                                  ["/nonexistent/folder", "name=a"]])
def test_bad_arguments_fail_with_status_2(tmp_path, capsys, args):
    assert cli_main(["live-profile", *args]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_the_committed_live_profile_composes_in_the_simulator(tmp_path):
    from testbed.backends.sim import SimSettings

    path = PROFILE_DIR / "live_measured.yaml"
    if not path.is_file() or "shared_cores" not in SimSettings.__dataclass_fields__:
        pytest.skip("no measured profile, or a simulator without backend.shared_cores")
    from tests.conftest import compose_config

    data = yaml.safe_load(path.read_text())
    cfg = compose_config("profile=live_measured", f"out={tmp_path}")
    assert cfg.backend.shared_cores == data["backend"]["shared_cores"]
    assert cfg.topology.operators["O2"].emission.sim.value == "incident"


def test_the_profile_extends_the_live_runs_own_profile(tmp_path):
    """Unmeasured settings (the policies', billing, the emulated lease delay) must be the live run's:
    the written profile names the runs' profile in its defaults, and Hydra composes both."""
    _live_run(tmp_path / "runs", profile="paper_calibrated")
    out = tmp_path / "x.yaml"
    assert cli_main(["live-profile", str(tmp_path / "runs"), "name=x", f"out={out}"]) == 0
    data = yaml.safe_load(out.read_text())
    assert data["defaults"] == ["paper_calibrated", "_self_"] and data["profile"] == "x"
    _live_run(tmp_path / "mixed", profile="paper")
    run_dir_two = _live_run(tmp_path / "mixed2", profile="visp2017")
    run_dir_two.rename(tmp_path / "mixed" / "stepwise" / "btu-10-live" / "2")
    assert cli_main(["live-profile", str(tmp_path / "mixed"), "name=y", f"out={tmp_path / 'y.yaml'}"]) == 0
    assert "defaults" not in yaml.safe_load((tmp_path / "y.yaml").read_text())  # the runs disagree: none


def test_service_time_is_busy_less_run_queue_delay_over_every_interval(tmp_path):
    """Busy wall time less the wait for a CPU: every interval counts, contended ones too; it keeps the
    wait for I/O that CPU time leaves out, and CPU time and the delay are shown beside it."""
    _live_run(tmp_path, cpu_share=0.2, delay_share=0.3)  # O1: 40 ms busy = 8 CPU + 12 run queue + 20 I/O
    m = lp.measure(tmp_path, cores=0.5)  # every interval beyond the shared cores
    o1 = m.service["O1"]
    assert m.clock == lp.SERVICE and o1.clock == lp.SERVICE and o1.intervals == 20
    assert o1.mean_ms == pytest.approx(28.0) and o1.wall_mean_ms == pytest.approx(40.0)
    assert o1.cpu_mean_ms == pytest.approx(8.0) and o1.delay_mean_ms == pytest.approx(12.0)
    assert o1.cv == pytest.approx(math.sqrt((2 * 0.7) ** 2 / 0.02 / lp.CHI2_1_MEDIAN) / 28.0)
    assert m.hop_latency_ms == pytest.approx(HOP_MS)  # a duration is wall time: less the wall service
    assert lp.profile_values(m)["topology.operators.O1.service.mean_ms"] == 28
    text = "\n".join(lp.header(m, "x"))
    assert "service time from busy wall time less run-queue delay" in text and "WARNING" not in text
    assert "mean 28.00 ms over 2000 items (all 20 intervals; CPU time 8.00 ms, run-queue delay 12.00 ms" in text


def test_the_busy_time_behind_the_service_is_uncapped(tmp_path):
    """An interval whose instance was busy longer than the interval (an item started before it) caps
    its utilisation at 1; busy less delay reads instance_cpu's uncapped busy time."""
    run = _live_run(tmp_path, cpu_share=0.2, delay_share=0.25)
    log = EventLog(run)
    cpu = log.read("instance_cpu")
    cpu.loc[cpu.operator == "O1", "busy_ms"] = 20000.0  # 5 s more than the 15 s interval
    cpu.loc[cpu.operator == "O1", "run_delay_ms"] = 8000.0
    log.write("instance_cpu", {c: cpu[c].tolist() for c in cpu.columns})
    assert lp.measure(tmp_path, cores=4).service["O1"].mean_ms == pytest.approx(120.0)  # (20000 - 8000) / 100


def test_runs_without_run_queue_delay_fall_back_to_cpu_time_with_a_warning(tmp_path):
    _live_run(tmp_path, cpu_share=0.5, delay_share=0.1)
    _live_run(tmp_path, cpu_share=0.5, rep=2)  # an image from before the delay was reported
    m = lp.measure(tmp_path, cores=0.5)
    o1 = m.service["O1"]
    assert m.clock == lp.CPU and m.without_delay == ["stepwise/btu-10-live/2"] and o1.intervals == 40
    assert o1.mean_ms == pytest.approx(20.0) and o1.wall_mean_ms == pytest.approx(40.0)
    assert o1.cv == pytest.approx(math.sqrt(50 / lp.CHI2_1_MEDIAN) / 20.0)  # neighbours 1 ms apart per 100 items
    text = "\n".join(lp.header(m, "x"))
    assert ("WARNING: service time from CPU time, not busy wall time less run-queue delay: stepwise/btu-10-live/2"
            in text and "busy wall time 40.00 ms" in text)


def test_runs_without_cpu_time_fall_back_to_busy_wall_time_with_a_warning(tmp_path):
    _live_run(tmp_path, cpu_share=0.5)
    _live_run(tmp_path, rep=2)  # recorded before CPU time was: the pooled values use one clock
    m = lp.measure(tmp_path, cores=4)
    assert m.clock == lp.BUSY and m.without_cpu == ["stepwise/btu-10-live/2"]
    assert m.service["O1"].mean_ms == pytest.approx(40.0)
    text = "\n".join(lp.header(m, "x"))
    assert "WARNING: service time from busy wall time, not CPU time: stepwise/btu-10-live/2" in text


def test_the_machine_load_of_each_run_is_in_the_header(tmp_path):
    load = {"cpus": 2, "other_cores": {"mean": 0.4, "p95": 1.1, "max": 1.3}, "containers_cores": {"mean": 0.9}}
    _live_run(tmp_path, details={"machine_load": load})
    _live_run(tmp_path, rep=2)
    text = "\n".join(lp.header(lp.measure(tmp_path, cores=2), "x"))
    assert "stepwise/btu-10-live/1: mean 0.4, p95 1.1, max 1.3 of 2 cores, cores left 1.6;" in text
    assert "stepwise/btu-10-live/2: not recorded" in text


def test_the_headers_command_puts_the_simulator_beside_the_live_runs(tmp_path):
    """The hint runs as written: it composes, and the runs folder takes it only with mix=true (the
    twin's profile differs from the live runs')."""
    from testbed import runs_folder

    out = tmp_path / "runs"
    _live_run(out, profile="paper_calibrated")
    lines = lp.header(lp.measure(out, cores=2), "live_measured")
    command = lines[-1].strip()
    assert command == (f"testbed experiment pattern=stepwise policy=btu billing.btu_minutes=10 backend=sim "
                       f"duration_min=5.0 out={out} profile=live_measured mix=true")
    overrides = command.split()[2:]
    cfg = compose_config(*overrides)
    assert cfg.mix and cfg.policy.name == "btu" and cfg.out == str(out)
    digest = runs_folder.settings_digest(cfg)
    runs_folder.check_settings(out / "stepwise", digest, cfg.mix)
    with pytest.raises(ConfigError, match="mix=true"):
        runs_folder.check_settings(out / "stepwise", digest, False)


def test_a_configuration_with_its_own_parameters_is_picked_from_its_evaluation():
    cfg = {"duration_min": 21.7, "seed": 3, "topology": {"tick_ms": 2400.0},
           "evaluation": {"configurations": [{"name": "dabs-util", "policy": "dabs", "params": {"sizing": "util"}}]}}
    m = Manifest(run_id="presps_spikes/dabs-util-live/1", experiment="presps_live", pattern="presps_spikes",
                 config="dabs-util-live", policy="dabs", btu_minutes=60, rep=1, seed=9, seeds={}, backend="docker",
                 resolved_config=cfg, code_revision="test", versions={}, billing="rebill")
    assert lp.twin_command(m, Path("runs")) == (
        "pattern=presps_spikes evaluation=presps_live evaluation.only=[dabs-util] backend=sim duration_min=21.7 "
        "topology.tick_ms=2400.0 seed=3 out=runs")


def test_several_runs_folders_are_pooled_and_each_values_spread_is_in_the_header(tmp_path):
    """Three runs in two folders, O1 busy 40 ms per item with 10, 15 or 20 ms of it waiting for a CPU:
    the profile pools them (25 ms: equal items) and its header gives every measured value's min /
    median / max over the runs measured alone; two runs of the same name are told apart by folder."""
    a = _live_run(tmp_path / "a", cpu_share=0.2, delay_share=0.25)
    b = _live_run(tmp_path / "b", cpu_share=0.2, delay_share=0.5)
    _live_run(tmp_path / "b", cpu_share=0.2, delay_share=0.375, rep=2)
    out = tmp_path / "pooled.yaml"
    assert cli_main(["live-profile", str(tmp_path / "a"), str(tmp_path / "b"), "name=pooled", f"out={out}",
                     "cores=2"]) == 0
    text = out.read_text()
    data = yaml.safe_load(text)
    assert data["topology"]["operators"]["O1"]["service"]["mean_ms"] == 25
    assert "3 complete run(s)" in text and f"  {a}: pattern stepwise" in text and f"  {b}: pattern stepwise" in text
    assert "# spread across the 3 runs, each measured alone" in text
    assert "#   topology.operators.O1.service.mean_ms: 20 / 25 / 30 (n=3)" in text
    assert "#   backend.hop_latency_ms: 20 / 20 / 20 (n=3)" in text
    assert "#   infrastructure.container_start_s[min]: 3 / 3 / 3 (n=3)" in text
    assert "#   topology.operators.O2.emission.items_per_incident: 600 / 600 / 600 (n=3)" in text
    assert "service.parallel" not in text.split("# spread across")[1].split("# the simulator beside")[0]
    m = lp.measure([tmp_path / "a", tmp_path / "b"], cores=2)
    [o1] = [s for s in lp.run_spreads(m) if s.key == "topology.operators.O1.service.mean_ms"]
    assert sorted(o1.values) == [20, 25, 30] and (o1.low, o1.median, o1.high) == (20, 25, 30)


def test_one_run_has_no_spread_section(tmp_path):
    _live_run(tmp_path, cpu_share=0.2, delay_share=0.25)
    m = lp.measure(tmp_path, cores=2)
    assert m.per_run == {} and lp.spread_lines(m) == []


def test_runs_folders_that_disagree_on_the_measurement_rule_are_refused(tmp_path, capsys):
    _live_run(tmp_path / "a")
    _live_run(tmp_path / "b", measurement="seconds_truncated")
    assert cli_main(["live-profile", str(tmp_path / "a"), str(tmp_path / "b"), "name=x",
                     f"out={tmp_path / 'x.yaml'}"]) == 2
    assert "differ in runtime.measurement" in capsys.readouterr().err


def test_the_wait_for_a_cpu_is_read_within_the_shared_cores(tmp_path):
    """service.wait_ms: run-queue delay per item over the intervals whose busy slots stay within the
    shared cores, the wait a woken worker pays on a machine with cores to spare."""
    _live_run(tmp_path, cpu_share=0.2, delay_share=0.3)  # O1: 40 ms busy, 12 of them waiting for a CPU
    m = lp.measure(tmp_path, cores=4)
    assert m.service["O1"].wait_ms == pytest.approx(12.0)
    values = lp.profile_values(m)
    assert values["topology.operators.O1.service.wait_ms"] == 12
    assert values["topology.operators.O3.service.wait_ms"] == 6
    assert "topology.operators.O1.service.wait_ms" not in lp.profile_values(lp.measure(tmp_path, cores=0.5))


def test_a_wait_is_not_read_without_the_run_queue_delay(tmp_path):
    _live_run(tmp_path, cpu_share=0.5)
    assert not any(k.endswith("wait_ms") for k in lp.profile_values(lp.measure(tmp_path, cores=4)))


def test_the_competing_threads_of_each_run_are_in_the_header(tmp_path):
    """Other load 1.2 cores; O1 (the most CPU) ran 8 of its 20 runnable ms per item: each runnable
    thread got 0.4 of a core, so the other load was 3 threads."""
    load = {"cpus": 2, "other_cores": {"mean": 1.2, "p95": 1.5, "max": 1.6}, "containers_cores": {"mean": 0.5}}
    _live_run(tmp_path, details={"machine_load": load}, cpu_share=0.2, delay_share=0.3)
    m = lp.measure(tmp_path, cores=2)
    assert m.competing["stepwise/btu-10-live/1"] == pytest.approx(3.0)
    assert "cores left 0.8, competing threads 3.00;" in "\n".join(lp.header(m, "x"))


def test_competing_threads_need_the_other_load_and_the_delay():
    rows = pd.DataFrame({"operator": ["O1", "O2"], "cpu_ms": [10.0, 1.0], "run_delay_ms": [10.0, 9.0],
                         "delay_known": [True, True]})
    load = {"other_cores": {"mean": 0.5}}
    assert lp.competing_threads(rows, load) == pytest.approx(1.0)  # O1's share 0.5, not O2's wake-up wait
    assert math.isnan(lp.competing_threads(rows, {}))
    assert math.isnan(lp.competing_threads(rows.assign(delay_known=[True, False]), load))
