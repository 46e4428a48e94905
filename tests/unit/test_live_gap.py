"""The Simulator vs live table (reporting/live_gap.py): X and X-live paired by name and pattern, gaps
in the fidelity section's kinds, the within-target marks, the section only when a pair exists."""
from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List, Optional, Tuple

import pandas as pd
import pytest

from reporting import live_gap as lg
from reporting.report_document import Table
from testbed.eventlog import EventLog
from testbed.policies.base import INITIAL_DEPLOYMENT


def _rows(pattern: str, config: str, rep: int, values: Dict[str, float], btu: Optional[int] = 10) -> List[dict]:
    return [{"pattern": pattern, "approach": config.split("-")[0], "config": config, "rep": rep,
             "btu_minutes": btu, "metric": m, "value": v} for m, v in values.items()]


def _frame(*parts: List[dict]) -> pd.DataFrame:
    df = pd.DataFrame([r for p in parts for r in p])
    df["btu_minutes"] = pd.array(df["btu_minutes"], dtype="Int64")
    return df


SIM = {"realtime_compliance_pct": 80.0, "paid_btus": 10.0, lg.SCALING_ACTIONS: 10.0,
       "migrations": 0.0, "mean_instances": 5.0}


def _per_run() -> pd.DataFrame:
    return _frame(
        _rows("stepwise", "btu-10", 1, {**SIM, "realtime_compliance_pct": 78.0}),
        _rows("stepwise", "btu-10", 2, {**SIM, "realtime_compliance_pct": 82.0}),  # mean 80
        # live: compliance 72 (sim 8 pp above: off), BTUs 11 (-9.1 %: within), actions 6+6=12 (-16.7 %:
        # off), migrations 0 = 0 (within), instances 4 (+25 %: off)
        _rows("stepwise", "btu-10-live", 1, {"realtime_compliance_pct": 72.0, "paid_btus": 11.0,
                                             lg.SCALING_ACTIONS: 12.0, "migrations": 0.0, "mean_instances": 4.0}),
        _rows("sine", "btu-10-live", 1, {"realtime_compliance_pct": 50.0}),  # no simulated twin on sine
        _rows("stepwise", "threshold", 1, SIM),  # no live twin: not in the table
    )


BACKENDS = {"-live": "docker", "-flink": "flink"}  # what the manifests of runs named so would say


def _side(config: str) -> Tuple[str, str]:
    return next(((config.removesuffix(s), b) for s, b in BACKENDS.items() if config.endswith(s)), (config, "sim"))


def _sides(frame: pd.DataFrame) -> Dict[Tuple[str, str], Tuple[str, str]]:
    """(pattern, config) -> (configuration, backend), as run_sides reads them from the manifests."""
    if frame.empty:
        return {}
    return {(p, c): _side(c) for p, c in zip(frame["pattern"], frame["config"], strict=True)}


def _gap(frame: pd.DataFrame) -> lg.LiveGap:
    return lg.live_gap(frame, _sides(frame))


def _row(gaps: lg.LiveGap, metric: str, pattern: str = "stepwise") -> lg.GapRow:
    [row] = [r for r in gaps.rows if r.metric == metric and r.pattern == pattern]
    return row


def test_pairs_by_configuration_backend_and_pattern() -> None:
    keys = [("stepwise", "btu-10"), ("stepwise", "btu-10-live"), ("sine", "btu-10-live"), ("sine", "threshold"),
            ("stepwise", "threshold-flink")]
    paired, unpaired = lg.pair_configs(keys, {(p, c): _side(c) for p, c in keys})
    assert paired == [lg.Pair("stepwise", "btu-10", "btu-10", "btu-10-live")]
    assert unpaired == [("sine", "btu-10-live")]


def test_the_manifests_say_which_run_is_live_not_the_names() -> None:
    """A simulated configuration whose name ends in -live is no live run; a live run pairs with the
    simulated runs of the configuration its manifest names."""
    keys = [("stepwise", "x-live"), ("stepwise", "x"), ("stepwise", "on-engine")]
    sides = {("stepwise", "x-live"): ("x-live", "sim"), ("stepwise", "x"): ("x", "sim"),
             ("stepwise", "on-engine"): ("x", "docker")}
    paired, unpaired = lg.pair_configs(keys, sides)
    assert paired == [lg.Pair("stepwise", "x", "x", "on-engine")] and unpaired == []


def test_gaps_and_within_target() -> None:
    gaps = _gap(_per_run())
    assert {(r.pattern, r.config) for r in gaps.rows} == {("stepwise", "btu-10")}
    assert gaps.unpaired == [("sine", "btu-10-live")]

    rt = _row(gaps, "realtime_compliance_pct")
    assert (rt.sim_mean, rt.n_sim, rt.live_median, rt.n_live) == (80.0, 2, 72.0, 1)
    assert (rt.kind, rt.unit, rt.tolerance) == ("points", "pp", 5.0)
    assert rt.gap == pytest.approx(8.0) and rt.normalised_gap == pytest.approx(1.6) and rt.within is False

    btus = _row(gaps, "paid_btus")
    assert btus.btu_minutes == 10 and btus.kind == "relative"
    assert btus.gap == pytest.approx(100 * (10 - 11) / 11) and btus.within is True

    actions = _row(gaps, lg.SCALING_ACTIONS)
    assert (actions.sim_mean, actions.live_median) == (10.0, 12.0)
    assert actions.gap == pytest.approx(-100 / 6) and actions.within is False

    migrations = _row(gaps, "migrations")
    assert (migrations.gap, migrations.normalised_gap, migrations.within) == (0.0, 0.0, True)

    instances = _row(gaps, "mean_instances")
    assert instances.gap == pytest.approx(25.0) and instances.within is False

    # neither side has queue depth or latency: no rows for them
    assert not [r for r in gaps.rows if r.metric in lg.EXTRA_METRICS and r.metric != lg.SCALING_ACTIONS]
    frame = gaps.frame()
    assert list(frame.columns) == lg.COLUMNS and len(frame) == len(gaps.rows)


def test_the_live_side_is_the_median_of_its_runs_with_their_range() -> None:
    """Three live runs of one configuration: the simulator is compared with their median (72, not
    the mean 74 an odd run pulls), their range is kept and shown; a run without the value is left out."""
    per_run = _frame(
        _rows("stepwise", "btu-10", 1, SIM),
        _rows("stepwise", "btu-10", 2, SIM),
        *(_rows("stepwise", "btu-10-live", rep, {"realtime_compliance_pct": rt, "paid_btus": btus,
                                                 "latency_ms": lat}, btu=10)
          for rep, rt, btus, lat in ((1, 60.0, 11.0, 100.0), (2, 90.0, 9.0, math.nan), (3, 72.0, 10.0, 300.0))))
    gaps = _gap(per_run)
    rt = _row(gaps, "realtime_compliance_pct")
    assert (rt.sim_mean, rt.n_sim, rt.live_median, rt.live_min, rt.live_max, rt.n_live) == (80.0, 2, 72.0, 60.0,
                                                                                             90.0, 3)
    assert rt.gap == pytest.approx(8.0) and rt.within is False
    btus = _row(gaps, "paid_btus")
    assert (btus.live_median, btus.live_min, btus.live_max) == (10.0, 9.0, 11.0) and btus.gap == 0.0
    lat = _row(gaps, "latency_ms")
    assert (lat.live_median, lat.live_min, lat.live_max) == (200.0, 100.0, 300.0)
    heads, rows = lg.table_rows(gaps, "stepwise")
    assert heads[2:4] == ["sim mean (n)", "live median (n)"]
    [cell] = [r[3] for r in rows if r[1].startswith("real-time")]
    assert cell == "72.0 (3), range 60.0–90.0"
    frame = gaps.frame()
    assert list(frame.columns) == lg.COLUMNS
    assert frame.set_index("metric").loc["realtime_compliance_pct", ["live_min", "live_max"]].tolist() == [60.0, 90.0]


def test_one_live_run_shows_no_range() -> None:
    _, rows = lg.table_rows(_gap(_per_run()), "stepwise")
    [cell] = [r[3] for r in rows if r[1].startswith("real-time")]
    assert cell == "72.0 (1)"


def test_ratio_metrics_and_missing_side() -> None:
    per_run = _frame(_rows("p", "hpa-80", 1, {"latency_ms": 130.0, "latency_p95_ms": 400.0}, btu=None),
                     _rows("p", "hpa-80-live", 1, {"latency_ms": 100.0, "latency_p95_ms": math.nan,
                                                   "mean_queue_depth": 3.0}, btu=None))
    gaps = _gap(per_run)
    lat = _row(gaps, "latency_ms", "p")
    assert lat.kind == "ratio" and lat.gap == pytest.approx(1.3) and lat.within is True
    assert lat.btu_minutes is None
    p95 = _row(gaps, "latency_p95_ms", "p")  # live has no value: not measurable
    assert math.isnan(p95.gap) and p95.within is None
    depth = _row(gaps, "mean_queue_depth", "p")  # only live has it
    assert math.isnan(depth.sim_mean) and depth.within is None


def test_section_only_with_a_pair() -> None:
    assert lg.sections(_gap(_per_run()[lambda d: d.config != "btu-10"])) == []
    assert lg.sections(_gap(pd.DataFrame())) == []
    no_pair = _gap(_frame(_rows("sine", "btu-10-live", 1, {"realtime_compliance_pct": 50.0})))
    assert no_pair.rows == [] and no_pair.unpaired == [("sine", "btu-10-live")]
    assert lg.sections(no_pair) == []

    [section] = lg.sections(_gap(_per_run()), ["paper_calibrated"])
    assert section.title == "Simulator vs live"
    text = " ".join(b for b in section.blocks if isinstance(b, str))
    assert "`paper_calibrated`" in text and "sine/btu-10-live" in text
    [table] = [b for b in section.blocks if isinstance(b, Table)]
    assert table.caption.startswith("stepwise")
    rt = next(r for r in table.rows if r[1].startswith("real-time"))
    assert rt == ["btu-10", "real-time compliance %", "80.0 (2)", "72.0 (1)", "+8.0 pp", "±5 pp", "no"]


def test_extras_from_the_event_logs(tmp_path: Path) -> None:
    dirs = {}
    for config, depth, lat in (("btu-10", [2, 4], [10.0, 30.0]), ("btu-10-live", [6, 6], [20.0, 20.0])):
        run_dir = tmp_path / "stepwise" / config / "1"
        run_dir.mkdir(parents=True)
        log = EventLog(run_dir)
        log.write("queues", {"t_s": [10.0, 20.0], "operator": ["A", "A"], "depth": depth})
        log.write("latency", {"t_s": [1.0, 2.0], "operator": ["S", "S"], "latency_ms": lat})
        # the deployment's scale-up is not the policy's; the simulated run scales twice, the live once
        acts = ["scale_up", "scale_up", "scale_down", "migrate"][: 4 if config == "btu-10" else 2] + ["lease"]
        n = len(acts)
        log.write("actions", {"t_s": [0.0] + [60.0] * (n - 1), "action": acts, "operator": ["A"] * n,
                              "instance": ["A-1"] * n, "host": ["vm1"] * n, "target_host": [None] * n,
                              "reason": [INITIAL_DEPLOYMENT] + ["policy"] * (n - 1), "policy": ["btu"] * n})
        dirs[("stepwise", config, 1)] = run_dir
    plain = {k: v for k, v in SIM.items() if k != lg.SCALING_ACTIONS}
    per_run = _frame(_rows("stepwise", "btu-10", 1, plain), _rows("stepwise", "btu-10-live", 1, plain))
    gaps = _gap(lg.add_extras(per_run, dirs, _sides(per_run)))
    depth_row = _row(gaps, "mean_queue_depth")
    assert (depth_row.sim_mean, depth_row.live_median) == (3.0, 6.0) and depth_row.gap == pytest.approx(0.5)
    assert depth_row.within is False
    assert _row(gaps, "latency_ms").within is True  # 20 vs 20
    actions = _row(gaps, lg.SCALING_ACTIONS)
    assert (actions.sim_mean, actions.live_median) == (2.0, 1.0)


def _run(config: str, cfg: dict) -> SimpleNamespace:
    manifest = SimpleNamespace(resolved_config=cfg, config=config, backend=_side(config)[1])
    return SimpleNamespace(pattern="stepwise", config=config, manifest=manifest)


def test_profiles_and_setting_differences() -> None:
    sim = {"profile": "paper_calibrated", "backend": {"name": "sim"}, "topology": {"tick_ms": 480.0}, "reps": 2}
    live = {"profile": "paper_calibrated", "backend": {"name": "docker"}, "topology": {"tick_ms": 1920.0}, "reps": 1}
    runs = [_run("btu-10", sim), _run("btu-10", sim), _run("btu-10-live", live), _run("threshold", {"profile": "x"})]
    gaps = _gap(_per_run())
    assert lg.profiles(runs, {("stepwise", "btu-10")}) == ["paper_calibrated"]  # type: ignore[arg-type]
    diffs = lg.config_differences(runs, gaps)  # type: ignore[arg-type]
    assert diffs == {("stepwise", "btu-10"): ["topology.tick_ms"]}  # backend and reps differ by design
    assert lg.config_differences([_run("btu-10", sim), _run("btu-10-live", {**live, "topology": {"tick_ms": 480.0}})],
                                 gaps) == {}  # type: ignore[arg-type]
    [section] = lg.sections(gaps, ["paper_calibrated"], diffs)
    assert any(isinstance(b, str) and "`topology.tick_ms`" in b for b in section.blocks)



def test_mix_and_the_other_keys_of_where_runs_go_are_no_setting_difference() -> None:
    """A simulated twin put beside the live runs with mix=true (its profile differs) differs from them
    in mix, out and workers: none of these is how a run runs."""
    live = {"profile": "paper_calibrated", "backend": {"name": "docker"}, "mix": False, "out": "runs", "workers": 0}
    sim = {**live, "profile": "live_measured", "backend": {"name": "sim"}, "mix": True, "out": "/elsewhere",
           "workers": 2}
    diffs = lg.config_differences([_run("btu-10", sim), _run("btu-10-live", live)], _gap(_per_run()))  # type: ignore[list-item]
    assert diffs == {("stepwise", "btu-10"): ["profile"]}
