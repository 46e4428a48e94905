"""A simulator profile measured from Flink runs (testbed/fidelity/engine_profile.py) and the report's
Simulator vs Flink table (reporting/evaluations/daedalus/engine_gap.py), on small runs folders built
the way the Flink job mode and the simulator write their tables (testbed/job/tables.py)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
import pandas as pd
import pytest
import yaml

from reporting.evaluations.daedalus import engine_gap
from testbed.cli import main as cli_main
from testbed.eventlog import EventLog, Manifest, run_dir_for, write_manifest
from testbed.experiment import plan_runs
from testbed.fidelity import engine_profile as ep
from testbed.fidelity.profile_file import PROFILE_DIR
from testbed.job.tables import RESCALE_COLUMNS, job_tables
from tests.conftest import compose_config

F = 72.0  # time compression of the synthetic Flink runs
MU = 25.0  # sentences/s of one TaskManager at busy 1
PEAK = 45.0


class _Policy:
    name = "daedalus"

    def records(self):
        return {}


def _write_run(root: Path, config: str, segments: Sequence[Tuple[int, int, float]],
               rescales: Sequence[Tuple[int, int, int]] = (), *, flink: bool = True, floor_ms: float = 100.0,
               pattern: str = "wc_sine", rep: int = 1, status: str = "complete") -> Path:
    """A job-mode run of one row per second, written as the runtimes write it: `segments` of (seconds,
    TaskManagers, arrivals/s); a rescale (at second k, seconds until running at the new parallelism, of
    them the last seconds with nothing processed) starts where the parallelism changes. Each
    TaskManager processes up to MU/s of the backlog, busy = its share / MU; latency = floor + the
    backlog's wait."""
    target = [n for secs, n, _ in segments for _ in range(secs)]
    arrivals = [a for secs, _, a in segments for _ in range(secs)]
    D, top = len(target), 4
    down = {k: (d, stop) for k, d, stop in rescales}
    thr, cpu = np.zeros((D, top)), np.full((D, top), np.nan)
    lag, parallel, running = np.zeros(D), [], []
    lat_t: List[float] = []
    lat_ms: List[float] = []
    table = {c: [] for c in RESCALE_COLUMNS}
    n, busy_until, stop_from, backlog, recovering = target[0], -1, -1, 0.0, None
    for k in range(D):
        if target[k] != n and k in down:
            d, stop = down[k]
            for c, v in (("t_s", float(k)), ("from_n", n), ("to_n", target[k]), ("downtime_s", float(d)),
                         ("replayed", 0), ("lag_before", backlog), ("recovered_s", math.nan),
                         ("capacity_before", n * MU), ("capacity_after", target[k] * MU)):
                table[c].append(v)
            old, n, busy_until, stop_from = min(n, target[k]), target[k], k + d, k + d - stop
            recovering = len(table["t_s"]) - 1
        rescaling = k < busy_until
        workers = 0 if rescaling and k >= stop_from else (old if rescaling else n)
        done = min(backlog + arrivals[k], workers * MU)
        if workers:
            thr[k, :workers] = done / workers
            cpu[k, :workers] = done / workers / MU
            lat_t.append(k + 1.0)
            lat_ms.append(floor_ms + 1000.0 * backlog / (workers * MU))
        backlog += arrivals[k] - done
        lag[k] = backlog
        parallel.append(n)
        running.append(0 if rescaling else n)
        if recovering is not None and not rescaling and backlog <= max(table["lag_before"][recovering], arrivals[k]):
            table["recovered_s"][recovering] = k + 1 - table["t_s"][recovering]
            recovering = None
    tables = job_tables(1, np.array(arrivals), thr, cpu, lag, parallel, running, lat_t, lat_ms, [], _Policy(),
                        table)  # type: ignore[arg-type]
    run_dir = run_dir_for(root, pattern, config, rep)
    log = EventLog(run_dir)
    for name, cols in tables.items():
        log.write(name, cols)
    details: Dict[str, Any] = {"job": {"mu": MU, "capacity": {str(i): i * MU for i in range(1, top + 1)},
                                       "peak_rate": PEAK, "items": float(sum(arrivals)), "unprocessed_at_end": 0.0}}
    if flink:
        details.update({"flink": {"engine": "flink", "settings": {"vocabulary": 10000, "zipf": 1.0}},
                        "time_compression": F})
    write_manifest(run_dir, Manifest(
        run_id=f"{pattern}/{config}/{rep}", experiment="daedalus_flink", pattern=pattern, config=config,
        policy="daedalus", btu_minutes=0, rep=rep, seed=rep, seeds={}, backend="flink" if flink else "sim",
        resolved_config={"job": {"enabled": True, "capacity_workers": 2}}, code_revision="test", versions={},
        status=status, details=details))
    return run_dir


def _flink_run(root: Path, config: str = "daedalus-flink", **kw: Any) -> Path:
    """1 TaskManager at 5/s (load 0.2), a scale-out 1 -> 2 taking 4 s (the last one stopped) while 40/s
    arrive (a backlog), 2 at 40/s, a scale-in 2 -> 1 taking 2 s (both stopped), 1 at 5/s."""
    return _write_run(root, config, [(20, 1, 5.0), (40, 2, 40.0), (30, 1, 5.0)], [(20, 4, 1), (60, 2, 2)], **kw)


def test_the_profile_is_measured_and_in_the_papers_time(tmp_path):
    _flink_run(tmp_path)
    m = ep.measure(tmp_path)
    assert m.f == F and m.runs == ["wc_sine/daedalus-flink/1"]
    assert [(r.from_n, r.to_n, r.downtime_s, r.stop_s) for r in m.rescales] == [(1, 2, 4.0, 1.0), (2, 1, 2.0, 2.0)]
    assert [r.catchup_s for r in m.rescales] == [5.0, 1.0]  # until the lag is back, after the downtime
    assert set(m.floor_ms) == {100.0}  # 40/s on 2 is no low load, and the backlog's seconds are out
    # the capacity shows where a backlog is worked off (not in the first second after the stop)
    assert list(m.job_capacity) == [2] and m.job_capacity[2].tolist() == [2 * MU] * 4
    assert m.tm_capacity.tolist() == [MU] * 4 and m.mu == MU
    v = ep.profile_values(m)
    assert v["downtime_out_s"] == [4 * F, 4 * F] and v["downtime_in_s"] == [2 * F, 2 * F]
    assert v["base_latency_ms"] == 100 * F
    assert v["peak_fraction"] == pytest.approx(PEAK / (2 * MU))
    assert "cpu_noise" not in v and np.abs(m.busy_residual).max() < 0.03  # busy = throughput / MU, rounded
    assert (v["keys"], v["key_distribution"], v["zipf_s"]) == (10000, "zipf", 1.0)
    stop = ep.profile_values(m, downtime="stop")  # only the seconds with nothing processed
    assert stop["downtime_out_s"] == [1 * F, 1 * F] and stop["downtime_in_s"] == [2 * F, 2 * F]
    split = ep.profile_values(m, downtime="split")  # Flink's sequence: the TaskManager starts, then the stop
    assert split["start_delay_s"] == [3 * F, 3 * F] and split["downtime_out_s"] == [1 * F, 1 * F]
    assert split["downtime_in_s"] == [2 * F, 2 * F] and "start_delay_s" not in v


def test_the_cli_writes_a_hydra_profile_with_its_sources(tmp_path, capsys):
    _flink_run(tmp_path / "runs")
    out = tmp_path / "flink_measured.yaml"
    assert cli_main(["engine-profile", str(tmp_path / "runs"), "name=flink_measured", f"out={out}"]) == 0
    text = out.read_text()
    assert text.startswith("# @package _global_\n")
    assert "1 -> 2: downtime" in text and "2 rescale(s)" not in text and "1 rescale(s)" in text
    data = yaml.safe_load(text)
    assert data["profile"] == "flink_measured"
    assert data["job"]["downtime_out_s"] == [288, 288] and data["job"]["base_latency_ms"] == 7200
    from testbed.job_config import JobConfig

    assert JobConfig(**{k: v for k, v in data["job"].items()}).validate() is None  # the simulator takes it


def test_a_direction_never_measured_is_left_to_the_evaluation(tmp_path):
    _write_run(tmp_path, "hpa-80-flink", [(20, 1, 5.0), (20, 2, 40.0)], [(20, 3, 1)])
    v = ep.profile_values(ep.measure(tmp_path))
    assert v["downtime_out_s"] == [3 * F, 3 * F] and "downtime_in_s" not in v


@pytest.mark.parametrize("setup, message", [
    (lambda root: None, "no complete Flink runs"),
    (lambda root: _write_run(root, "daedalus", [(10, 1, 5.0)], flink=False), "no complete Flink runs"),
    (lambda root: _flink_run(root, status="incomplete"), "no complete Flink runs"),
    (lambda root: _write_run(root, "static-2-flink", [(10, 2, 5.0)]), "no completed rescales"),
    (lambda root: _write_run(root, "hpa-80-flink", [(10, 1, 5.0), (10, 2, 5.0)], [(10, 2, 0)]),
     "no second with a backlog"),
])
def test_input_without_engine_figures_fails_with_one_line_and_status_2(tmp_path, capsys, setup, message):
    (tmp_path / "runs").mkdir()
    setup(tmp_path / "runs")
    assert cli_main(["engine-profile", str(tmp_path / "runs"), "name=x", f"out={tmp_path / 'x.yaml'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
    assert not (tmp_path / "x.yaml").exists()


@pytest.mark.parametrize("args", [[], ["runs"], ["runs", "name=a-b"], ["runs", "name=a", "speed=2"],
                                  ["runs", "name=a", "low_load=2"], ["runs", "name=a", "downtime=x"]])
def test_bad_arguments_fail_with_status_2(tmp_path, capsys, args):
    assert ep.main(args) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def _sim_run(root: Path, config: str = "daedalus", rep: int = 1, floor_ms: float = 250.0) -> Path:
    """A simulated twin in the paper's time: 2 workers, a scale-out of 30 s and a scale-in of 15 s."""
    return _write_run(root, config, [(100, 2, 30.0), (100, 3, 30.0), (100, 2, 30.0)], [(100, 30, 30), (200, 15, 15)],
                      flink=False, rep=rep, floor_ms=floor_ms)


def _mean_latency(run_dir: Path) -> float:
    return float(pd.read_parquet(run_dir / "latency.parquet").latency_ms.mean())


def test_the_comparison_pairs_a_simulated_configuration_with_its_flink_run(tmp_path):
    flink = _flink_run(tmp_path)
    sims = [_sim_run(tmp_path, rep=1, floor_ms=200.0), _sim_run(tmp_path, rep=2, floor_ms=400.0)]
    _sim_run(tmp_path, "hpa-80")  # no Flink twin: not compared
    runs = [(d.parts[-3], d.parts[-2], d) for d in sorted(tmp_path.glob("*/*/*"))]
    per_run = engine_gap.pairs(runs)
    assert sorted(set(zip(per_run.config, per_run.side, strict=True))) == [("daedalus", "flink"), ("daedalus", "sim")]
    t = engine_gap.side_by_side(per_run)
    [r] = t.itertuples()
    assert (r.pattern, r.config, r.n_sim, r.n_flink) == ("wc_sine", "daedalus", 2, 1)
    assert r.rescales_sim == 2 and r.rescales_flink == 2 and r.rescales_gap == 0
    # the Flink run's real times x f (downtimes 4 and 2 s, its latencies), the simulator's as they are
    assert r.downtime_out_s_flink == pytest.approx(4 * F) and r.downtime_in_s_flink == pytest.approx(2 * F)
    assert r.downtime_out_s_sim == 30 and r.downtime_in_s_sim == 15
    assert r.downtime_out_s_gap == pytest.approx(30 / (4 * F))
    assert r.latency_ms_flink == pytest.approx(_mean_latency(flink) * F)
    sim_latency = np.median([_mean_latency(d) for d in sims])  # the median of the two repetitions
    assert r.latency_ms_sim == pytest.approx(sim_latency)
    assert r.latency_ms_gap == pytest.approx(sim_latency / (_mean_latency(flink) * F))
    assert r.mean_workers_gap == pytest.approx(r.mean_workers_sim - r.mean_workers_flink)


def test_the_flink_side_is_the_median_of_its_runs_with_their_range(tmp_path):
    """Three Flink runs of one configuration, at latency floors 100, 150 and 900 ms: the Flink column
    is their median (not pulled by the odd one), the range is shown, the gap is against the median."""
    flinks = [_flink_run(tmp_path, rep=k, floor_ms=f) for k, f in ((1, 100.0), (2, 150.0), (3, 900.0))]
    _sim_run(tmp_path)
    runs = [(d.parts[-3], d.parts[-2], d) for d in sorted(tmp_path.glob("*/*/*"))]
    [r] = engine_gap.side_by_side(engine_gap.pairs(runs)).itertuples()
    latencies = sorted(_mean_latency(d) * F for d in flinks)
    assert r.n_flink == 3 and r.latency_ms_flink == pytest.approx(latencies[1])
    assert r.latency_ms_flink_min == pytest.approx(latencies[0])
    assert r.latency_ms_flink_max == pytest.approx(latencies[2])
    assert r.latency_ms_gap == pytest.approx(r.latency_ms_sim / latencies[1])
    rows = [{"pattern": d.parts[-3], "config": d.parts[-2], "rep": 1, "run_dir": str(d)}
            for d in sorted(tmp_path.glob("*/*/*"))]
    [section] = engine_gap.sections(pd.DataFrame(rows))
    [table] = [b for b in section.blocks if not isinstance(b, str)]
    cell = table.rows[0][table.headers.index("latency ms Flink")]
    assert cell == f"{latencies[1]:,.0f} ({latencies[0]:,.0f}–{latencies[2]:,.0f})"
    assert table.rows[0][table.headers.index("workers Flink")].count("(") == 0  # the same in every run: no range


def test_three_repetitions_a_side_give_each_side_its_median_and_range_and_the_text_names_the_spread(tmp_path):
    """reps=3 of daedalus_flink plans three Flink runs of every configuration; with three simulated
    repetitions beside them, both columns are medians with their ranges, and the section's text names
    each side's widest spread and the gaps that lie within it."""
    cfg = compose_config("evaluation=daedalus_flink", "reps=3", f"out={tmp_path}", "evaluation.only=[daedalus]")
    assert sorted(s.rep for s in plan_runs(cfg)) == [1, 2, 3]
    flinks = [_flink_run(tmp_path, rep=k, floor_ms=f) for k, f in ((1, 100.0), (2, 150.0), (3, 900.0))]
    sims = [_sim_run(tmp_path, rep=k, floor_ms=f) for k, f in ((1, 9000.0), (2, 30000.0), (3, 12000.0))]
    runs = [(d.parts[-3], d.parts[-2], d) for d in sorted(tmp_path.glob("*/*/*"))]
    table = engine_gap.side_by_side(engine_gap.pairs(runs))
    [r] = table.itertuples()
    sim = sorted(_mean_latency(d) for d in sims)
    flink = sorted(_mean_latency(d) * F for d in flinks)
    assert (r.n_sim, r.n_flink) == (3, 3)
    assert (r.latency_ms_sim, r.latency_ms_sim_min, r.latency_ms_sim_max) == pytest.approx((sim[1], sim[0], sim[2]))
    assert r.latency_ms_gap == pytest.approx(sim[1] / flink[1])  # between the medians
    [row] = table.to_dict("records")
    assert engine_gap.overlaps(row, "latency_ms") is (sim[0] <= flink[2])
    assert engine_gap.overlaps(row, "mean_workers") is False  # 2.33 simulated, 1.44 on Flink in every run
    text = engine_gap.spread_text(table, "wc_sine")
    assert "daedalus 3 / 3" in text and "reps=3" not in text
    assert f"{flink[0]:,.0f}–{flink[2]:,.0f}" in text and f"{sim[0]:,.0f}–{sim[2]:,.0f}" in text
    rows = [{"pattern": d.parts[-3], "config": d.parts[-2], "rep": 1, "run_dir": str(d)}
            for d in sorted(tmp_path.glob("*/*/*"))]
    [section] = engine_gap.sections(pd.DataFrame(rows))
    [table_block] = [b for b in section.blocks if not isinstance(b, str)]
    assert table_block.rows[0][table_block.headers.index("latency ms sim")] == \
        f"{sim[1]:,.0f} ({sim[0]:,.0f}–{sim[2]:,.0f})"
    assert text in section.blocks


def test_one_run_a_side_is_said_to_have_no_spread(tmp_path):
    _flink_run(tmp_path)
    _sim_run(tmp_path)
    runs = [(d.parts[-3], d.parts[-2], d) for d in sorted(tmp_path.glob("*/*/*"))]
    text = engine_gap.spread_text(engine_gap.side_by_side(engine_gap.pairs(runs)), "wc_sine")
    assert "daedalus 1 / 1" in text and "no spread" in text and "reps=3" in text and "widest" not in text


def test_the_report_section_has_one_table_per_workload_and_none_without_pairs(tmp_path):
    _flink_run(tmp_path)
    _sim_run(tmp_path)
    rows = [{"pattern": d.parts[-3], "config": d.parts[-2], "rep": 1, "run_dir": str(d)}
            for d in sorted(tmp_path.glob("*/*/*"))]
    [section] = engine_gap.sections(pd.DataFrame(rows))
    assert section.title == "Simulator vs Flink"
    [table] = [b for b in section.blocks if not isinstance(b, str)]
    assert "paper-time ms" in table.caption and table.rows[0][0] == "daedalus"
    assert table.rows[0][1] == "1 / 1" and len(table.rows[0]) == len(table.headers)
    assert table.rows[0][-3:] == ["15", "144", "×0.10"]  # downtime in: sim, Flink (2 s x 72), their ratio
    assert engine_gap.sections(pd.DataFrame([r for r in rows if r["config"] == "daedalus"])) == []


@pytest.mark.parametrize("name", ["flink_measured", "flink_measured_split"])
def test_the_committed_flink_profile_composes_with_the_evaluation_in_the_simulator(tmp_path, name):
    from tests.conftest import compose_config

    path = PROFILE_DIR / f"{name}.yaml"
    if not path.is_file():
        pytest.skip("no measured profile yet (testbed engine-profile writes it)")
    job = yaml.safe_load(path.read_text())["job"]
    cfg = compose_config("evaluation=daedalus_flink", "backend=sim", f"profile={name}", f"out={tmp_path}")
    assert cfg.profile == name and cfg.backend.name == "sim"
    assert cfg.job.start_delay_s == job.get("start_delay_s", [0.0, 0.0])
    assert cfg.job.downtime_out_s == job["downtime_out_s"] and cfg.job.base_latency_ms == job["base_latency_ms"]
    assert cfg.job.max_scaleout == 4 and cfg.job.capacity_workers == 2  # the evaluation's, not the profile's
