"""The claim engine (reporting/claims.py): each comparison kind on small hand-made tables, the
not-evaluable cases, and the checks of a claim spec at config load and when the report reads it."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from reporting.claims import (
    FAILS,
    HOLDS,
    KINDS,
    NOT_EVALUABLE,
    ClaimSpec,
    check,
    declared,
    declared_sources,
    greater,
    judge,
    less,
    monotone_increasing,
    not_greater,
    ratio_at_most,
    values,
    within,
)
from testbed.claim_spec import KIND_NAMES, validate
from testbed.config import ConfigError
from tests.conftest import compose_config


def _v(cells: str) -> dict:
    """{(config, metric): value} from "config:metric=value ..."."""
    out = {}
    for cell in cells.split():
        key, _, value = cell.partition("=")
        config, _, metric = key.partition(":")
        out[(config, metric)] = float(value)
    return out


def test_every_declared_kind_has_a_check() -> None:
    assert tuple(KINDS) == KIND_NAMES


def test_greater_and_less_over_several_values_list_each_failure() -> None:
    spec = ClaimSpec(id="c", compare="greater", metrics=["rt", "nrt"], configs=["b-1", "b-2"], against="t",
                     labels={"rt": "real-time"}, holds="everywhere")
    ok = _v("b-1:rt=5 b-2:rt=6 t:rt=4 b-1:nrt=9 b-2:nrt=9 t:nrt=8")
    assert greater(spec, ok) == (HOLDS, "everywhere")
    bad = {**ok, ("b-2", "rt"): 4.0}
    assert greater(spec, bad).status == FAILS and greater(spec, bad).detail == "b-2 real-time 4.00 <= 4.00"
    assert less(spec, ok).detail == "b-1 real-time 5.00 >= 4.00; b-2 real-time 6.00 >= 4.00; b-1 nrt 9.00 >= 8.00; " \
                                    "b-2 nrt 9.00 >= 8.00"


def test_one_pair_gives_its_numbers_and_the_change() -> None:
    spec = ClaimSpec(id="c", compare="less", metrics=["cost"], configs=["b-60"], against="t@60")
    assert less(spec, _v("b-60:cost=98 t@60:cost=120")).detail == "98.00 vs 120.00 (18 % lower)"
    assert less(spec, {("b-60", "cost"): 130.0, ("t@60", "cost"): 120.0}) == (FAILS, "130.00 >= 120.00")
    up = ClaimSpec(id="c", compare="greater", metrics=["x"], configs=["a"], against="b")
    assert greater(up, {("a", "x"): 150.0, ("b", "x"): 100.0}).detail == "150.00 vs 100.00 (50 % higher)"


def test_missing_values_make_a_claim_not_evaluable_and_are_named() -> None:
    spec = ClaimSpec(id="c", compare="greater", metrics=["rt"], configs=["b-1", "b-2"], against="t")
    assert greater(spec, {("b-1", "rt"): 1.0}) == (NOT_EVALUABLE, "missing: t rt")
    assert greater(spec, {("t", "rt"): 1.0, ("b-1", "rt"): 2.0}) == (NOT_EVALUABLE, "missing: b-2 rt")
    mono = ClaimSpec(id="m", compare="monotone_increasing", metrics=["rt"], configs=["a", "b"])
    assert monotone_increasing(mono, {("a", "rt"): 1.0}) == (NOT_EVALUABLE, "missing: rt")


def test_not_greater_allows_the_named_exceptions_against_the_same_btu() -> None:
    spec = ClaimSpec(id="c", compare="not_greater", metrics=["cost"], configs=["b-10", "b-30"], against="t@{btu}",
                     allow=["b-10 cost"])
    cells = {("b-10", "cost"): 5.0, ("t@10", "cost"): 4.0, ("b-30", "cost"): 3.0, ("t@30", "cost"): 4.0}
    assert not_greater(spec, cells) == (HOLDS, "above the baseline only: b-10 cost 5.00 > 4.00")
    assert not_greater(spec, {**cells, ("b-10", "cost"): 1.0}) == (HOLDS, "never above the baseline")
    assert not_greater(spec, {**cells, ("b-30", "cost"): 4.5}).status == FAILS
    del cells[("t@30", "cost")]
    assert not_greater(spec, cells) == (NOT_EVALUABLE, "missing: t@30 cost")


def test_monotone_increasing_needs_no_fall_and_a_rise() -> None:
    spec = ClaimSpec(id="m", compare="monotone_increasing", metrics=["rt"], configs=["a", "b", "c"],
                     holds="every level")
    assert monotone_increasing(spec, {("a", "rt"): 1.0, ("b", "rt"): 1.0, ("c", "rt"): 2.0}) == (HOLDS, "every level")
    assert monotone_increasing(spec, {("a", "rt"): 1.0, ("b", "rt"): 1.0, ("c", "rt"): 1.0}) == (FAILS,
                                                                                              "rt 1.00, 1.00, 1.00")
    assert monotone_increasing(spec, {("a", "rt"): 1.0, ("b", "rt"): 3.0, ("c", "rt"): 2.0}).status == FAILS


def test_ratio_at_most_and_within() -> None:
    ratio = ClaimSpec(id="r", compare="ratio_at_most", metrics=["R"], configs=["a"], against="b", bound=1.8)
    assert ratio_at_most(ratio, {("a", "R"): 180.0, ("b", "R"): 100.0}) == (HOLDS, "a R 180.00 vs 100.00 (ratio 1.80)")
    assert ratio_at_most(ratio, {("a", "R"): 181.0, ("b", "R"): 100.0}).status == FAILS
    assert ratio_at_most(ratio, {("a", "R"): 1.0, ("b", "R"): 0.0}).status == FAILS
    near = ClaimSpec(id="w", compare="within", metrics=["R"], configs=["a"], against="b", bound=0.5)
    assert within(near, {("a", "R"): 1.4, ("b", "R"): 1.0}).status == HOLDS
    assert within(near, {("a", "R"): 0.4, ("b", "R"): 1.0}) == (FAILS, "a R 0.40 vs 1.00 (difference -0.60)")


def test_check_reads_configurations_as_paper_comparison_names_them() -> None:
    # the paper's table has approaches and BTU lengths; a live run counts as its simulated twin, as the
    # measured table's backend column says
    paper = pd.DataFrame({"pattern": "p", "approach": ["btu", "threshold", "threshold"], "btu_minutes": [60, None, 60],
                          "metric": ["cost", "rt", "cost"], "mean": [1.0, 2.0, 3.0]})
    assert values(paper, "p") == {("btu-60", "cost"): 1.0, ("threshold", "rt"): 2.0, ("threshold@60", "cost"): 3.0}
    measured = paper.assign(config=["btu-60-live", "threshold-live", "threshold-live"], backend="docker")
    spec = ClaimSpec(id="c", text="cheaper", compare="less", metrics=["cost"], configs=["btu-60"],
                     against="threshold@60")
    rows = check([spec], measured, paper)
    assert rows.to_dict("records") == [{"pattern": "p", "claim": "c", "text": "cheaper", "paper": HOLDS,
                                        "paper_detail": "1.00 vs 3.00 (67 % lower)", "measured": HOLDS,
                                        "measured_detail": "1.00 vs 3.00 (67 % lower)"}]
    # without the column (a summary written before it existed) each name is its own configuration
    assert check([spec], measured.drop(columns="backend"), paper)["measured"].tolist() == [NOT_EVALUABLE]
    # a simulated configuration whose name ends as a live run's keeps its name
    assert ("threshold-live", "rt") in values(measured.assign(backend="sim"), "p")


@pytest.mark.parametrize("spec, message", [
    (ClaimSpec(compare="less", metrics=["x"], configs=["a"], against="b"), r"evaluation.claims\[0\].id: missing"),
    (ClaimSpec(id="c", compare="lower", metrics=["x"], configs=["a"], against="b"),
     r"evaluation.claims\[0\].compare: 'lower' is not one of greater"),
    (ClaimSpec(id="c", compare="less", configs=["a"], against="b"), r"evaluation.claims\[0\].metrics: "),
    (ClaimSpec(id="c", compare="less", metrics=["x"], against="b"), r"evaluation.claims\[0\].configs: "),
    (ClaimSpec(id="c", compare="less", metrics=["x"], configs=["a"]), r"evaluation.claims\[0\].against: "),
    (ClaimSpec(id="c", compare="monotone_increasing", metrics=["x"], configs=["a"]),
     r"evaluation.claims\[0\].configs: monotone_increasing needs at least two"),
    (ClaimSpec(id="c", compare="within", metrics=["x"], configs=["a"], against="b"),
     r"evaluation.claims\[0\].bound: within needs a bound > 0"),
    (ClaimSpec(id="c", compare="less", metrics=["x"], configs=["a"], against="b", each="b"),
     r"evaluation.claims\[0\].each: name \{each\} in configs or against"),
    (ClaimSpec(id="c", compare="less", metrics=["x"], configs=["a"], against="{each}"),
     r"evaluation.claims\[0\].each: \{each\} is named; say which family"),
    (ClaimSpec(id="c", compare="less", metrics=["x"], configs=["a"], against="b", fallback={"y": "z"}),
     r"evaluation.claims\[0\].fallback: 'y' is not one of the claim's metrics"),
    (ClaimSpec(id="c", compare="within", metrics=["x"], configs=["a"], against="b", bound=1.0, at_least=0.5),
     r"evaluation.claims\[0\].at_least: only greater and less"),
    (ClaimSpec(id="c", compare="less", metrics=["x"], configs=["a"], against="b", decimals=-1),
     r"evaluation.claims\[0\].decimals: -1 is not in"),
])
def test_spec_errors_name_the_key(spec: ClaimSpec, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate([spec])


def test_repeated_ids_are_refused() -> None:
    good = ClaimSpec(id="c", compare="less", metrics=["x"], configs=["btu-60"], against="threshold@{btu}")
    validate([good])
    with pytest.raises(ValueError, match=r"evaluation.claims\[1\].id: 'c' repeats claim 0"):
        validate([good, good])


def test_config_load_refuses_a_bad_claim_naming_its_key() -> None:
    assert len(compose_config("evaluation=btu").evaluation.claims) == 4  # the declared ones load
    # a configuration renamed by an override leaves its claims to the report ("not evaluable")
    renamed = compose_config("evaluation=btu", "evaluation.configurations.0.name=fixed-3")
    assert any(n.startswith("threshold") for c in renamed.evaluation.claims for n in [*c.configs, c.against])
    with pytest.raises(ConfigError, match=r"evaluation.claims\[2\].compare: 'most' is not one of"):
        compose_config("evaluation=btu", "evaluation.claims.2.compare=most")


def test_declared_claims_and_sources(tmp_path: Path) -> None:
    assert [c.id for c in declared("btu")] == ["compliance_above_baseline", "btu60_resource_cost_below_baseline",
                                              "only_btu10_realtime_total_cost_above", "compliance_rising_with_btu"]
    assert declared_sources("daedalus_oee") == ("experiments/reference/paper_btu_results.csv", "btu")
    assert declared_sources("compare") == ("experiments/reference/paper_btu_results.csv", "")  # no claims
    (tmp_path / "mine.yaml").write_text("evaluation:\n  claims:\n    - {id: a, compare: less, metrics: [x], "
                                        "configs: [p], against: q, threshold: 3}\n")
    with pytest.raises(ValueError, match=r"evaluation.claims\[0\].threshold: no such key of a claim"):
        declared("mine", tmp_path)


def _long(pattern: str, cells: dict) -> pd.DataFrame:
    """A measured long table of one pattern from {(config, metric): mean}, BTU-free values."""
    return pd.DataFrame([{"pattern": pattern, "approach": c, "config": c, "btu_minutes": pd.NA, "metric": m,
                          "mean": v} for (c, m), v in cells.items()])


FAMILY = ClaimSpec(id="P", text="lower", compare="less", metrics=["x"], configs=["new"], against="{each}", each="old")


def test_a_family_claim_is_checked_per_member_measured_and_against_the_family_on_paper() -> None:
    second = ClaimSpec(id="Q", text="higher", compare="greater", metrics=["y"], configs=["{each}"], against="new",
                       each="old")
    measured = _long("p", {("new", "x"): 1.0, ("old-b", "x"): 0.5, ("old", "x"): 2.0, ("new", "y"): 3.0,
                           ("old", "y"): 4.0, ("old-b", "y"): 5.0, ("other-c", "x"): 9.0})
    paper = pd.DataFrame({"pattern": "p", "approach": ["new", "old"], "btu_minutes": pd.NA, "metric": "x",
                          "mean": [1.0, 3.0]})
    rows = check([FAMILY, second], measured, paper)
    # member by member (the family itself first), the claims in their order within each
    assert rows["claim"].tolist() == ["P (old)", "Q (old)", "P (old-b)", "Q (old-b)"]
    assert rows["text"].tolist()[2] == "lower (old-b)"
    assert rows["measured"].tolist() == [HOLDS, HOLDS, FAILS, HOLDS]
    assert rows["measured_detail"].tolist()[2] == "1.00 >= 0.50"
    assert rows["paper"].tolist() == [HOLDS, NOT_EVALUABLE] * 2  # the paper's `old`, whatever was measured
    # one member measured: no suffix; none but the claim's other configuration: the family, not evaluable
    assert check([FAMILY], _long("p", {("new", "x"): 1.0, ("old-b", "x"): 2.0}), paper)["claim"].tolist() == ["P"]
    alone = check([FAMILY], _long("p", {("new", "x"): 1.0}), paper)
    assert alone[["claim", "measured", "measured_detail"]].values.tolist() == [["P", NOT_EVALUABLE, "missing: old x"]]
    # a pattern with none of the claim's configurations is not the claim's: no row
    assert check([FAMILY], _long("q", {("third", "x"): 1.0}), paper).empty


def test_fallback_floor_and_decimals() -> None:
    spec = ClaimSpec(id="f", compare="less", metrics=["x5"], configs=["a"], against="b", fallback={"x5": "x30"},
                     fallback_note="(30 s)", decimals=3)
    assert judge(spec, {("a", "x5"): 1.0, ("b", "x5"): 2.0}) == (HOLDS, "1.000 vs 2.000 (50 % lower)")
    assert judge(spec, {("a", "x30"): 1.0, ("b", "x30"): 2.0, ("a", "x5"): 1.0}) == (
        HOLDS, "1.000 vs 2.000 (50 % lower) (30 s)")
    # neither metric complete: missing, named by the claim's own metric
    assert judge(spec, {("a", "x30"): 1.0}) == (NOT_EVALUABLE, "missing: a x5, b x5")
    floor = ClaimSpec(id="g", compare="greater", metrics=["r"], configs=["a"], against="b", at_least=0.99,
                      decimals=4)
    assert greater(floor, {("a", "r"): 0.995, ("b", "r"): 0.9}) == (HOLDS, "0.9950 vs 0.9000 (11 % higher)")
    assert greater(floor, {("a", "r"): 0.98, ("b", "r"): 0.9}) == (FAILS, "0.9800 below 0.99")
    two = ClaimSpec(id="h", compare="greater", metrics=["r"], configs=["a", "c"], against="b", at_least=0.99)
    assert greater(two, {("a", "r"): 0.995, ("c", "r"): 0.98, ("b", "r"): 0.9}) == (FAILS, "c r 0.98 below 0.99")


def test_claims_are_not_part_of_a_runs_folders_settings() -> None:
    from testbed.runs_folder import settings_digest

    cfg = compose_config("evaluation=presps")
    assert cfg.evaluation.claims  # P1-P4 are declared
    bare = compose_config("evaluation=presps")
    bare.evaluation.claims = []
    assert settings_digest(cfg) == settings_digest(bare)
