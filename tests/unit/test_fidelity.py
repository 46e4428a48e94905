"""Calibration and fidelity: the distance on hand-made tables, the search space's overrides, a tiny
seeded calibration (reproducible, its profile loadable by Hydra), sweeps and the report section."""
from __future__ import annotations

import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from reporting.fidelity_gaps import MISSING_GAP, cell_gaps, distance, strongest
from reporting.fidelity_section import FidelityInputs, fidelity_section
from reporting.paper_comparison import compare
from reporting.report_document import Table
from testbed.config import CONF_DIR, ConfigError, Measurement
from testbed.fidelity.calibration import calibrate, parse_config
from testbed.fidelity.evaluation import Loop, compose_experiment
from testbed.fidelity.parameters import config_values, current_values, round3, to_overrides
from testbed.fidelity.sensitivity import behaviour_variants
from testbed.fidelity.validation import parse_config as parse_fidelity_config


def _ref(rows):
    ref = pd.DataFrame(rows, columns=["pattern", "approach", "btu_minutes", "metric", "mean", "sd", "note"])
    ref["btu_minutes"] = pd.array(ref["btu_minutes"], dtype="Int64")
    return ref


def _measured(rows):
    m = pd.DataFrame(rows, columns=["pattern", "approach", "btu_minutes", "metric", "mean", "sd", "n"])
    m["btu_minutes"] = pd.array(m["btu_minutes"], dtype="Int64")
    return m


REFERENCE = _ref([
    ("p", "btu", 10, "realtime_compliance_pct", 50.0, 1.0, ""),
    ("p", "threshold", None, "realtime_compliance_pct", 40.0, 1.0, ""),
    ("p", "btu", 10, "resource_cost", 100.0, 3.0, ""),
    ("p", "btu", 10, "paid_btus", 100.0, 3.0, ""),  # neither compliance nor cost: not a cell
])


def test_distance_normalises_pp_and_percent_gaps():
    measured = _measured([
        ("p", "btu", 10, "realtime_compliance_pct", 52.0, 0.0, 1),  # +2 pp -> 0.4
        ("p", "threshold", None, "realtime_compliance_pct", 30.0, 0.0, 1),  # -10 pp -> 2.0
        ("p", "btu", 10, "resource_cost", 115.0, 0.0, 1),  # +15 % -> 1.0, on the edge
    ])
    gaps = cell_gaps(compare(measured, REFERENCE))
    assert sorted(gaps["normalised_gap"].round(6)) == [0.4, 1.0, 2.0]
    assert gaps.set_index("metric").loc["resource_cost", "unit"] == "%"
    assert list(gaps.sort_values("normalised_gap")["within"]) == [True, True, False]
    d = distance(measured, REFERENCE, "p")
    assert d.cells == 3 and d.within == 2
    assert d.value == pytest.approx(math.sqrt((0.16 + 1.0 + 4.0) / 3))
    assert (d.worst_metric, d.worst_config) == ("realtime_compliance_pct", "threshold")


def test_distance_counts_missing_cells_and_zero_when_equal():
    same = _measured([(p, a, b, m, v, 0.0, 3) for p, a, b, m, v, _, _ in REFERENCE.itertuples(index=False)])
    assert distance(same, REFERENCE, "p").value == 0.0
    partial = same[same["metric"] != "resource_cost"]
    d = distance(partial, REFERENCE, "p")
    assert d.within == 2 and d.value == pytest.approx(math.sqrt(MISSING_GAP ** 2 / 3))
    assert distance(same.iloc[0:0], REFERENCE, "p").within == 0
    with pytest.raises(ValueError, match="pattern"):
        distance(same, REFERENCE, "nowhere")


SPACE = Loop.load("btu").spec.parameters
BY_NAME = {p.name: p for p in SPACE}


def test_parameters_map_to_config_keys():
    assert round3(1234.5) == 1230.0 and round3(0.012345) == 0.0123
    assert config_values({"container_start_s": 20.0}, SPACE) == {"infrastructure.container_start_s": [10.0, 20.0]}
    overrides = to_overrides({"kpi_service_ms": 80.0, "cpu_contention": True}, SPACE)
    assert overrides == ["backend.cpu_contention=true", "topology.operators.O3.service.mean_ms=80.0",
                         "topology.operators.O4.service.mean_ms=80.0", "topology.operators.O5.service.mean_ms=80.0"]
    assert BY_NAME["parallel"].variants(1) == [("2", 2)]
    assert BY_NAME["measurement"].variants("milliseconds") == [("seconds_truncated", "seconds_truncated")]
    values = current_values(compose_experiment(["profile=visp2017"]))
    assert values["measurement"] == "seconds_truncated" and values["o1_service_ms"] == 450.0
    assert values["lease_delay_s"] == 60.0  # the upper end of the paper's 30-60 s


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError) as exc:
        parse_config(["budget=0"])
    assert exc.value.key == "budget"
    with pytest.raises(ConfigError) as exc:
        parse_config(["bugdet=3"])
    assert "bugdet" in str(exc.value)
    with pytest.raises(ConfigError) as exc:
        parse_config(["base_profile=nope"])
    assert exc.value.key == "base_profile"
    with pytest.raises(ConfigError) as exc:
        parse_fidelity_config(["profile=visp2017", "patterns=[stepwise,nope]"])
    assert exc.value.key == "patterns[1]"


def _tiny(tmp_path: Path, tag: str):
    conf = tmp_path / f"conf-{tag}"
    shutil.copytree(CONF_DIR, conf)
    cfg = parse_config(["budget=2", "startup_trials=1", "duration_min=2", "seed=7", "name=tiny_calibrated",
                        f"conf_dir={conf}", f"record_dir={tmp_path / f'record-{tag}'}"])
    return conf, calibrate(cfg)


@pytest.mark.slow
def test_calibration_is_reproducible_and_its_profile_loads(tmp_path):
    conf_a, a = _tiny(tmp_path, "a")
    conf_b, b = _tiny(tmp_path, "b")
    text_a = (conf_a / "profile" / "tiny_calibrated.yaml").read_text()
    assert text_a == (conf_b / "profile" / "tiny_calibrated.yaml").read_text()
    assert [t.distance for t in a.trials] == [t.distance for t in b.trials]
    assert len(a.trials) == 2 and a.best.distance == min(t.distance for t in a.trials)
    # the first trial is the base profile's own values; the others differ from it
    assert a.trials[0].values == current_values(compose_experiment(["profile=visp2017"]))
    assert any(t.values != a.trials[0].values for t in a.trials[1:])
    # Hydra composes the written profile: the base profile's behaviours plus the best values
    loaded = compose_experiment(["profile=tiny_calibrated"], conf_a)
    assert loaded.profile == "tiny_calibrated"
    assert current_values(loaded) == a.best.values
    assert loaded.policies["threshold"].up2_threshold == 1250  # from visp2017
    assert loaded == compose_experiment(["profile=visp2017", *to_overrides(a.best.values, SPACE),
                                         "profile=tiny_calibrated"], conf_a)
    record = pd.read_csv(a.record_paths[0])
    assert list(record["trial"]) == [0, 1] and record["distance"].min() == pytest.approx(a.best.distance)


def test_committed_calibrated_profile_composes():
    path = CONF_DIR / "profile" / "paper_calibrated.yaml"
    if not path.is_file():
        pytest.skip("no calibrated profile yet (testbed calibrate writes it)")
    cfg = compose_experiment(["profile=paper_calibrated", "pattern=two_level"])
    assert cfg.profile == "paper_calibrated" and cfg.policies["threshold"].up_threshold == 250
    assert isinstance(cfg.runtime.measurement, Measurement)


@pytest.mark.slow
def test_behaviour_variants_toggle_each_visp_switch():
    variants = {v.name: v for v in behaviour_variants("visp2017", "stepwise")}
    assert set(variants) == {"thresholds", "trigger", "policies.btu.release_window_min_s",
                             "policies.btu.prolong_after_lease_s",
                             "runtime.measurement", "runtime.sampling"}
    assert variants["thresholds"].overrides == ("policies.threshold.down_threshold=1",
                                                "policies.threshold.up2_threshold=250",
                                                "policies.threshold.up_threshold=50")
    assert variants["runtime.measurement"].overrides == ("runtime.measurement=milliseconds",)
    on = {v.name: v for v in behaviour_variants("paper", "stepwise")}
    assert on["thresholds"].overrides == ("policies.threshold.down_threshold=20",
                                          "policies.threshold.up2_threshold=1250",
                                          "policies.threshold.up_threshold=250")
    assert on["trigger"].label == "on (visp2017)"
    for v in [*variants.values(), *on.values()]:  # every toggled profile is a valid config
        compose_experiment(["profile=visp2017", *v.overrides])


def _sensitivity():
    rows = []
    for name, delta in (("o1_service_ms", 4.0), ("hop_latency_ms", -9.0), ("service_cv", 1.0)):
        rows.append({"group": "parameter", "name": name, "variant": "x2", "config": "btu-10",
                     "metric": "resource_cost", "mean_paper": 100.0, "measured": 100.0 + delta,
                     "profile_value": 100.0, "delta": delta, "unit": "%", "distance": 1.0,
                     "profile_distance": 0.8, "overrides": ""})
    return pd.DataFrame(rows)


def test_strongest_and_fidelity_section_explain_a_miss():
    table = _sensitivity()
    assert [n for n, _, _ in strongest(table, "btu-10", "resource_cost", top=2)] == ["hop_latency_ms", "o1_service_ms"]
    reference = _ref([(p, "btu", 10, m, v, 1.0, "") for p in ("cal", "held")
                      for m, v in (("realtime_compliance_pct", 50.0), ("resource_cost", 100.0))])
    measured = _measured([("cal", "btu", 10, "realtime_compliance_pct", 51.0, 0.0, 3),
                          ("cal", "btu", 10, "resource_cost", 101.0, 0.0, 3),
                          ("held", "btu", 10, "realtime_compliance_pct", 49.0, 0.0, 3),
                          ("held", "btu", 10, "resource_cost", 130.0, 0.0, 3)])
    claims = pd.DataFrame({"pattern": ["cal", "held"], "claim": ["c", "c"], "paper": ["holds", "holds"],
                           "measured": ["holds", "does not hold"]})
    inputs = FidelityInputs({"profile": "x", "calibrated_on": "cal", "reps": 3, "seed": 1}, {}, table, None, None, [])
    section = fidelity_section(inputs, compare(measured, reference), claims)
    texts = [b for b in section.blocks if isinstance(b, str)]
    miss = next(t for t in texts if t.startswith("held btu-10 resource_cost"))
    assert "+30.0 %" in miss and ("missed by 15.0 "
                                  "%") in miss and miss.index("hop_latency_ms") < miss.index("o1_service_ms")
    per_pattern = next(b for b in section.blocks if isinstance(b, Table) and b.headers[0] == "workload")
    assert per_pattern.rows[0][:3] == ["cal", "calibration", "1/1"] and per_pattern.rows[1][4] == "0/1"
