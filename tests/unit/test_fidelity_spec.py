"""An evaluation's fidelity loop as data: the spec's checks name the key, cell kinds measure gaps
as documented, scaled parameters keep their ratios, and every evaluation that declares a loop
composes with its search space on real config keys."""
from __future__ import annotations

import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from reporting.fidelity_gaps import MISSING_GAP, cell_gaps, gaps_distance
from testbed.config import CONF_DIR, ConfigError
from testbed.fidelity.calibration import parse_config
from testbed.fidelity.evaluation import Loop, compose_experiment
from testbed.fidelity.parameters import current_values, to_overrides
from testbed.fidelity_spec import FidelityParameter, FidelitySpec, validate


def _spec(**kw) -> FidelitySpec:
    base = dict(calibrate_on="w", profile="cal", cells={"latency_ms": "ratio"},
                parameters=[FidelityParameter("x", "float", ["job.base_latency_ms"], 1.0, 10.0)])
    return FidelitySpec(**{**base, **kw})


@pytest.mark.parametrize("change, key", [
    (dict(calibrate_on="nope"), "calibrate_on"),
    (dict(validate_on=["w", "other"]), "validate_on[1]"),
    (dict(profile="paper"), "profile"),
    (dict(cells={"latency_ms": "log"}), "cells.latency_ms"),
    (dict(cells={}), "cells"),
    (dict(budget=0), "budget"),
    (dict(parameters=[FidelityParameter("x", "float", ["a"], 5.0, 1.0)]), "parameters[0].low"),
    (dict(parameters=[FidelityParameter("x", "log_float", ["a"], 0.0, 1.0)]), "parameters[0].low"),
    (dict(parameters=[FidelityParameter("x", "cube", ["a"], 0.0, 1.0)]), "parameters[0].kind"),
    (dict(parameters=[FidelityParameter("x", "categorical", ["a"], choices=[1])]), "parameters[0].choices"),
    (dict(parameters=[FidelityParameter("x", "float", [], 0.0, 1.0)]), "parameters[0].keys"),
    (dict(parameters=[FidelityParameter("x", "float", ["a", "b"], 0.0, 1.0, factors=[1.0])]),
     "parameters[0].factors"),
    (dict(parameters=[FidelityParameter("x", "float", ["a"], 0.0, 1.0)] * 2), "parameters[1].name"),
    (dict(fixed={"job.base_latency_ms": 3}), "fixed.job.base_latency_ms"),
    (dict(alternatives=[FidelityParameter("y", "categorical", ["b"], choices=[1, 2])]), "alternatives"),
    (dict(calibrate_configs=["a"], alternatives=[FidelityParameter("x", "categorical", ["b"], choices=[1, 2])]),
     "alternatives[0].name"),
])
def test_spec_errors_name_the_key(change, key):
    with pytest.raises(ValueError) as exc:
        validate(_spec(**change), ["w"])
    assert str(exc.value).startswith(f"evaluation.fidelity.{key}: ")


def test_no_parameters_means_no_loop_and_no_checks():
    validate(FidelitySpec(calibrate_on="nowhere"), ["w"])
    validate(_spec(validate_on=["w", "daedalus_ks:ks_sine"]), ["w"])


def test_config_load_rejects_a_key_the_config_does_not_have():
    with pytest.raises(ConfigError) as exc:
        compose_experiment(["evaluation=daedalus", "evaluation.fidelity.parameters.0.keys=[job.no_such_key]"])
    assert exc.value.key == "evaluation.fidelity.parameters[0].keys"


def test_cell_kinds_measure_gaps_as_documented():
    comparison = pd.DataFrame({
        "pattern": "p", "approach": "a", "config": "a",
        "metric": ["latency_ms", "latency_ms", "saved", "workers", "pct", "workers", "other"],
        "mean_paper": [1000.0, 1000.0, 0.50, 10.0, 40.0, 10.0, 1.0],
        "mean_measured": [1300.0, 500.0, 0.53, 12.0, 30.0, math.nan, 9.0]})
    cells = {"latency_ms": "ratio", "saved": "share", "workers": "relative", "pct": "points"}
    gaps = cell_gaps(comparison, cells)
    assert list(gaps["metric"]) == ["latency_ms", "latency_ms", "saved", "workers", "pct", "workers"]
    assert list(gaps["unit"]) == ["x", "x", "pp", "%", "pp", "%"]
    assert gaps["gap"].iloc[:5].round(6).tolist() == [1.3, 0.5, 3.0, 20.0, -10.0]
    # x1.3 is exactly on the edge, x0.5 is ln 2 / ln 1.3 tolerances away
    assert gaps["normalised_gap"].iloc[:5].round(6).tolist() == [1.0, round(math.log(2) / math.log(1.3), 6), 0.6,
                                                                  round(20 / 15, 6), 2.0]
    assert gaps["normalised_gap"].iloc[5] == MISSING_GAP
    assert gaps["within"].tolist() == [True, False, True, False, False, False]
    d = gaps_distance(gaps)
    assert d.cells == 6 and d.within == 2 and d.worst_gap == MISSING_GAP


def test_a_scaled_parameter_keeps_the_ratios_and_reads_back():
    p = FidelityParameter("scale", "log_float", ["a", "b"], 0.1, 10.0, factors=[1.0, 2.0])
    assert p.config_values(0.7) == {"a": 0.7, "b": 1.4}
    assert p.value_of(0.7) == 0.7
    presps = Loop.load("presps")
    values = current_values(compose_experiment(["evaluation=presps"]), presps.spec.parameters)
    assert values["service_scale_ms"] == pytest.approx(0.696)  # A's cost; B has twice, C 1.5 times
    overrides = to_overrides({"service_scale_ms": 1.0}, presps.spec.parameters)
    assert "topology.operators.B.service.mean_ms=2.0" in overrides
    assert "topology.operators.C.service.mean_ms=1.5" in overrides


@pytest.mark.parametrize("evaluation", ["btu", "daedalus", "presps", "odp"])
def test_declared_loops_compose_with_their_values_and_measured_ones(evaluation):
    loop = Loop.load(evaluation)
    cfg = compose_experiment([f"evaluation={evaluation}"])
    values = current_values(cfg, loop.spec.parameters)
    assert set(values) == {p.name for p in loop.spec.parameters}
    # every trial's overrides compose into a valid config, measured values included
    trial = compose_experiment([f"evaluation={evaluation}", *loop.overrides(values)])
    assert current_values(trial, loop.spec.parameters) == values
    if evaluation == "daedalus":
        assert trial.job.downtime_in_s == [1.2, 2.0]


def test_searched_cells_are_the_calibration_configurations_only():
    loop = Loop.load("presps")
    ref = loop.reference()
    searched = loop.searched(ref, "presps_spikes")
    assert set(searched["approach"]) == {"presps"} and set(ref["approach"]) >= {"presps", "dabs"}
    assert "evaluation.only=[presps]" in loop.calibration_setting("presps_spikes", "paper", 1, 1, {}).extra


def test_a_key_the_evaluation_sets_itself_cannot_be_calibrated(tmp_path: Path):
    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    path = conf / "evaluation" / "daedalus.yaml"
    text = path.read_text().replace("job:\n  enabled: true\n", "job:\n  enabled: true\n  peak_fraction: 0.8\n")
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        Loop.load("daedalus", conf)
    assert exc.value.key == "evaluation.fidelity.parameters[2].keys"


def test_calibration_arguments_default_to_the_evaluation():
    cfg = parse_config(["evaluation=daedalus"]).resolve(Loop.load("daedalus"))
    assert (cfg.pattern, cfg.name, cfg.budget, cfg.duration_min) == ("wc_sine", "daedalus_calibrated", 24, 360.0)
    with pytest.raises(ConfigError) as exc:
        parse_config(["evaluation=daedalus", "pattern=stepwise"]).resolve(Loop.load("daedalus"))
    assert exc.value.key == "pattern"
    with pytest.raises(ConfigError) as exc:
        Loop.load("odp_nope")
    assert exc.value.key == "evaluation"
    with pytest.raises(ConfigError) as exc:
        Loop.load("daedalus_flink")  # runs on a real engine: nothing to calibrate there
    assert exc.value.key == "evaluation"


def _summary(rows):
    out = pd.DataFrame(rows, columns=["pattern", "approach", "config", "metric", "mean"])
    return out.assign(btu_minutes=pd.array([pd.NA] * len(out), dtype="Int64"), sd=math.nan, n=1)


def test_published_ratios_and_savings_are_measured_from_two_runs():
    from reporting.evaluations import report_for

    odp = report_for("odp")
    summary = _summary([("tag_and_count", "static", "odp-r", "R_ms", 100.0),
                        ("tag_and_count", "static", "odp-a", "R_ms", 180.0),
                        ("tag_and_count", "static", "odp-r", "k", 8.0)])
    comp = odp.compare(summary, odp.reference()).set_index(["config", "metric"])
    assert comp.loc[("odp-a", "R_ratio_to_odp_r"), "mean_measured"] == pytest.approx(1.8)
    assert comp.loc[("odp-r", "k"), "mean_measured"] == 8.0
    daedalus = report_for("daedalus")
    summary = _summary([("wc_sine", "daedalus", "daedalus", "mean_workers", 6.0),
                        ("wc_sine", "hpa", "hpa-80", "mean_workers", 8.0),
                        ("wc_sine", "daedalus", "daedalus-flink", "mean_workers", 2.0),
                        ("wc_sine", "hpa", "hpa-80-flink", "mean_workers", 4.0)])
    comp = daedalus.compare(summary, daedalus.reference())
    saved = comp[(comp.metric == "workers_saved_pct") & (comp.config == "hpa-80")]
    assert saved["mean_measured"].tolist() == [pytest.approx(25.0)]  # not against the Flink runs


def test_the_held_out_cells_judge_an_alternative():
    from reporting.fidelity_section import preferred_alternatives

    rows = []
    for variant, gap in (("queue", 3.0), ("drop", 0.5)):
        for config, g in (("dabs", gap), ("presps", 9.0)):  # presps' cells were searched: they do not judge
            rows.append({"group": "alternative", "name": "restart_source", "variant": variant, "config": config,
                         "normalised_gap": g, "profile_normalised_gap": 2.0 if config == "dabs" else 0.1})
    text = preferred_alternatives(pd.DataFrame(rows), ["presps"])
    assert text == ["restart_source: the held-out cells (dabs) prefer drop (distance 0.50; the profile's own 2.00, "
                    "queue 3.00, drop 0.50)."]


@pytest.mark.parametrize("evaluation", ["btu", "daedalus", "presps", "odp"])
def test_a_committed_profile_holds_its_record_s_best_values(evaluation):
    import json

    loop = Loop.load(evaluation)
    record = CONF_DIR.parent / "calibration" / f"{loop.spec.profile}.record.json"
    if not (CONF_DIR / "profile" / f"{loop.spec.profile}.yaml").is_file() or not record.is_file():
        pytest.skip(f"no calibrated profile for {evaluation} yet (testbed calibrate evaluation={evaluation})")
    best = json.loads(record.read_text())["best"]["values"]
    cfg = compose_experiment([f"evaluation={evaluation}", f"profile={loop.spec.profile}"])
    assert current_values(cfg, loop.spec.parameters) == best
    for key, value in loop.spec.fixed.items():  # the measured values are in the profile too
        from omegaconf import OmegaConf

        assert OmegaConf.select(OmegaConf.structured(cfg), key) == value


def test_configurations_of_one_published_approach_keep_their_names():
    from reporting.paper_comparison import compare

    ref = pd.DataFrame({"pattern": "p", "approach": ["presps", "dabs"], "btu_minutes": pd.array([pd.NA] * 2,
                                                                                                 dtype="Int64"),
                        "metric": "latency_ms", "mean": [2000.0, 1400.0], "sd": math.nan, "note": ""})
    measured = _summary([("p", "presps", "presps", "latency_ms", 2100.0), ("p", "dabs", "dabs", "latency_ms", 3000.0),
                         ("p", "dabs", "dabs-util", "latency_ms", 1500.0)])
    comp = compare(measured, ref)
    assert comp[["config", "approach", "mean_measured"]].values.tolist() == [
        ["presps", "presps", 2100.0], ["dabs", "dabs", 3000.0], ["dabs-util", "dabs", 1500.0]]


def test_fidelity_arguments_default_to_the_evaluation():
    from testbed.fidelity.validation import parse_config as parse_fidelity

    cfg = parse_fidelity(["evaluation=presps"]).resolve(Loop.load("presps"))
    assert (cfg.profile, cfg.patterns, cfg.sweeps) == ("presps_calibrated", ["presps_spikes"], ["sensitivity"])
    btu = parse_fidelity([]).resolve(Loop.load("btu"))
    assert btu.patterns == ["stepwise", "two_level", "random_walk_1", "random_walk_2"]
    assert btu.sweeps == ["sensitivity", "behaviours"]
    with pytest.raises(ConfigError) as exc:
        parse_fidelity(["evaluation=presps", "sweeps=[behaviours]"]).resolve(Loop.load("presps"))
    assert exc.value.key == "sweeps"


@pytest.mark.slow
def test_another_evaluation_s_calibration_is_reproducible(tmp_path: Path):
    from testbed.fidelity.calibration import calibrate

    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    texts, trials = [], []
    for tag in ("a", "b"):
        cfg = parse_config(["evaluation=presps", "budget=3", "startup_trials=1", "duration_min=3", "seed=5",
                            "name=presps_tiny", f"conf_dir={conf}", f"record_dir={tmp_path / tag}",
                            *(["force=true"] if tag == "b" else [])])  # the second replaces the first
        result = calibrate(cfg)
        texts.append((conf / "profile" / "presps_tiny.yaml").read_text())
        trials.append([(t.values, t.distance) for t in result.trials])
    assert texts[0] == texts[1] and trials[0] == trials[1]
    assert len(trials[0]) == 3 and "evaluation presps on workload presps_spikes" in texts[0].replace("\n# ", " ")
