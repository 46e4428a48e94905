"""Metrics from hand-built event logs whose answers are worked out by hand below."""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import pandas as pd
import pytest

from reporting import summary
from reporting.summary import SummaryError, format_summary, incomplete_runs, run_metrics, summarise
from testbed.eventlog import EventLog, Manifest, run_dir_for, write_manifest

REFERENCE = Path(__file__).resolve().parents[2] / "experiments" / "reference" / "paper_btu_results.csv"

# SLOs: A 100 ms, B 200 ms; X is excluded from the headline compliance (like O2/O6).
SLO = {"A": 100.0, "B": 200.0, "X": 100.0}
# A: <=100: 50, 100 (the bound complies) | <=200: +150 | <=500: +250 | 600 never
A_DURATIONS = [50.0, 100.0, 150.0, 250.0, 600.0]
# B: <=200: 100, 200 | <=400: +300 | <=1000: +900 | 1200 never
B_DURATIONS = [100.0, 200.0, 300.0, 900.0, 1200.0]
# headline over 10 samples: RT 4/10, NRT 6/10, relaxed 8/10; X adds 2 violations at every level
X_DURATIONS = [1000.0, 1000.0]

Sample = Tuple[float, str, float]  # t_s, operator, duration_ms
Lease = Tuple[str, float, float, float, int, int, bool]  # host, start, end, btu_s, paid, prolongations, released


def _resolved() -> Dict[str, Any]:
    return {
        "topology": {"operators": {op: {"slo_ms": slo} for op, slo in SLO.items()}, "compliance_excluded": ["X"]},
        "billing": {"btu_minutes": 60, "price_per_10_minutes": 1.0, "penalty_per_item": 0.0001,
                    "rebill_minutes": [60, 10, 30]},
        "policy": {"release_window_fraction": 0.05, "release_window_min_s": 0.0},
        "runtime": {"reasoning_s": 60.0},
    }


def _samples(durations: Dict[str, Sequence[float]]) -> List[Sample]:
    return [(float(i), op, d) for op in sorted(durations) for i, d in enumerate(durations[op])]


def make_run(root: Path, *, pattern: str = "stepwise", config: str = "threshold", rep: int = 1,
             policy: str = "threshold", btu_minutes: int = 60, samples: Optional[List[Sample]] = None,
             processed: Sequence[int] = (10_000, 20_000), leases: Sequence[Lease] = (),
             actions: Sequence[str] = (), status: str = "complete", billing: str = "",
             backend: str = "sim") -> Path:
    run_dir = run_dir_for(root, pattern, config, rep)
    samples = samples if samples is not None else _samples({"A": A_DURATIONS, "B": B_DURATIONS, "X": X_DURATIONS})
    log = EventLog(run_dir)
    log.write("samples", {"t_s": [s[0] for s in samples], "operator": [s[1] for s in samples],
                          "instance": [f"{s[1]}-0" for s in samples], "duration_ms": [s[2] for s in samples]})
    log.write("processed", {"t_s": [15.0 * (i + 1) for i in range(len(processed))],
                            "operator": ["A"] * len(processed), "items": list(processed)})
    log.write("actions", {"t_s": [float(i) for i in range(len(actions))], "action": list(actions),
                          "operator": [None] * len(actions), "instance": [None] * len(actions),
                          "host": [None] * len(actions), "target_host": [None] * len(actions),
                          "reason": ["test"] * len(actions), "policy": [policy] * len(actions)})
    names = ["host", "start_s", "end_s", "btu_s", "paid_btus", "prolongations", "released"]
    log.write("leases", {name: [lease[i] for lease in leases] for i, name in enumerate(names)})
    write_manifest(run_dir, Manifest(
        run_id=f"{pattern}-{config}-{rep}", experiment="test", pattern=pattern, config=config, policy=policy,
        btu_minutes=btu_minutes, rep=rep, seed=rep, seeds={"load": rep}, backend=backend,
        resolved_config=_resolved(), code_revision="test", versions={}, status=status, billing=billing,
    ))
    return run_dir


# a 25-minute lease of a run billed with 60-minute BTUs: 3 BTUs under 10, 1 under 30, 1 under 60
LEASE_25_MIN: Lease = ("h1", 0.0, 1500.0, 3600.0, 1, 0, True)


def test_compliance_penalty_and_rebilled_costs(tmp_path: Path) -> None:
    m = run_metrics(make_run(tmp_path, leases=[LEASE_25_MIN]))
    assert m["realtime_compliance_pct"] == pytest.approx(40.0)
    assert m["near_realtime_compliance_pct"] == pytest.approx(60.0)
    assert m["relaxed_compliance_pct"] == pytest.approx(80.0)
    # X's two violations count only in the _all version: 4/12, 6/12, 8/12
    assert m["realtime_compliance_all_pct"] == pytest.approx(100 * 4 / 12)
    assert m["near_realtime_compliance_all_pct"] == pytest.approx(50.0)
    assert m["relaxed_compliance_all_pct"] == pytest.approx(100 * 8 / 12)
    assert m["processed_items"] == 30_000
    # penalty = 0.0001 x 30,000 items x violation share (headline)
    assert m["realtime_penalty"] == pytest.approx(0.0001 * 30_000 * 0.6)  # 1.8
    assert m["near_realtime_penalty"] == pytest.approx(1.2)
    assert m["relaxed_penalty"] == pytest.approx(0.6)

    assert sorted(m["by_btu"]) == [10, 30, 60]  # threshold is re-billed under every BTU length
    costs = {b: (c["paid_btus"], c["resource_cost"]) for b, c in m["by_btu"].items()}
    assert costs == {10: (3, 3.0), 30: (1, 3.0), 60: (1, 6.0)}
    assert m["by_btu"][10]["realtime_total_cost"] == pytest.approx(3.0 + 1.8)
    assert m["by_btu"][30]["near_realtime_total_cost"] == pytest.approx(3.0 + 1.2)
    assert m["by_btu"][60]["relaxed_total_cost"] == pytest.approx(6.0 + 0.6)
    # released 5 min before the paid 30 min under 10/30-min BTUs (window 60 s / 90 s), 35 min under 60
    assert [m["by_btu"][b]["vm_early_releases"] for b in (10, 30, 60)] == [1, 1, 1]


def test_btu_run_billed_under_its_own_btu_and_early_releases(tmp_path: Path) -> None:
    leases: List[Lease] = [
        ("h1", 100.0, 1270.0, 600.0, 2, 1, True),  # released 30 s before its 2nd BTU ends: window 60 s
        ("h2", 0.0, 300.0, 600.0, 1, 0, True),  # released with 300 s paid and unused: early
        ("h3", 0.0, 7200.0, 600.0, 12, 11, False),  # still leased at the run's end: no release at all
        ("h4", 0.0, 1190.0, 600.0, 3, 2, True),  # prolonged at 1190 s, then released: pays 3 as stored
    ]
    actions = ["lease"] * 4 + ["prolong"] * 14 + ["release"] * 3 + ["scale_up"] * 3 + ["scale_down", "migrate",
                                                                                           "migrate", "replace"]
    run = make_run(tmp_path, config="btu-10", policy="btu", btu_minutes=10, leases=leases, actions=actions)
    m = run_metrics(run)
    assert sorted(m["by_btu"]) == [10]
    costs = m["by_btu"][10]
    assert costs["paid_btus"] == 2 + 1 + 12 + 3 and costs["resource_cost"] == pytest.approx(18.0)
    assert costs["realtime_total_cost"] == pytest.approx(18.0 + 1.8)
    # h4 has 610 s of paid time left > 60 s window: early (the prolongation was wasted)
    assert costs["vm_early_releases"] == 2
    counts = {k: m[k]
              for k in ("vm_leases", "vm_prolongations", "vm_releases", "scale_ups", "scale_downs", "migrations")}
    assert counts == {"vm_leases": 4, "vm_prolongations": 14, "vm_releases": 3, "scale_ups": 3,
                      "scale_downs": 1, "migrations": 2}


def test_billing_comes_from_the_manifest_not_the_policy_name(tmp_path: Path) -> None:
    lease = ("h1", 0.0, 1500.0, 600.0, 3, 2, True)  # 25 min under 10-min BTUs, 3 paid as stored
    # an approach of another name that plans around its own BTU is billed by it, like the BTU policy
    own = run_metrics(make_run(tmp_path / "own", config="visp-10", policy="visp", btu_minutes=10,
                               leases=[lease], billing="own"))
    assert sorted(own["by_btu"]) == [10] and own["by_btu"][10]["paid_btus"] == 3
    # and a run of the BTU policy marked "rebill" is re-billed under every BTU length
    rebill = run_metrics(make_run(tmp_path / "rebill", config="btu-agnostic", policy="btu", btu_minutes=10,
                                  leases=[lease], billing="rebill"))
    assert {b: c["paid_btus"] for b, c in rebill["by_btu"].items()} == {10: 3, 30: 1, 60: 1}
    # manifests older than the field: the BTU policy billed itself, everything else is re-billed
    assert sorted(run_metrics(make_run(tmp_path / "old", config="btu-10", policy="btu", btu_minutes=10,
                                       leases=[lease]))["by_btu"]) == [10]
    with pytest.raises(SummaryError, match="billing 'hourly'"):
        run_metrics(make_run(tmp_path / "bad", leases=[lease], billing="hourly"))


def test_summary_labels_follow_the_billing_mode(tmp_path: Path) -> None:
    lease = ("h1", 0.0, 1500.0, 600.0, 3, 2, True)
    make_run(tmp_path, config="visp-10", policy="visp", btu_minutes=10, leases=[lease], billing="own")
    make_run(tmp_path, config="btu-agnostic", policy="btu", btu_minutes=10, leases=[lease], billing="rebill")
    df = summarise(tmp_path)
    assert set(df.loc[df["config"] == "visp-10", "btu_minutes"]) == {10}
    assert df.loc[df["config"] == "btu-agnostic", "btu_minutes"].isna().any()
    labels = [line.split()[0] for line in format_summary(df).splitlines()[3:]]
    assert labels == ["btu-agnostic@10", "btu-agnostic@30", "btu-agnostic@60", "visp-10"]


def test_time_to_adapt(tmp_path: Path) -> None:
    ok_a, bad_a, ok_b, bad_b = 50.0, 150.0, 100.0, 300.0
    samples: List[Sample] = [
        # A: ok@0, bad@1, bad@2, ok@4 -> 3 s; bad@5, ok@8 -> 3 s; bad@9 is still open at the end
        (0.0, "A", ok_a), (1.0, "A", bad_a), (2.0, "A", bad_a), (4.0, "A", ok_a),
        (5.0, "A", bad_a), (8.0, "A", ok_a), (9.0, "A", bad_a),
        # B: starts violating (no compliant sample before: not an episode), ok@1, bad@2, ok@3 -> 1 s
        (0.0, "B", bad_b), (1.0, "B", ok_b), (2.0, "B", bad_b), (3.0, "B", ok_b),
    ]
    shuffled = samples[5:] + samples[:5]  # file order must not matter, only time order
    m = run_metrics(make_run(tmp_path, samples=shuffled))
    assert m["time_to_adapt_s"] == pytest.approx((3 + 3 + 1) / 3)


def test_time_to_adapt_nan_without_episodes(tmp_path: Path) -> None:
    m = run_metrics(make_run(tmp_path, samples=[(0.0, "A", 10.0), (1.0, "A", 20.0)]))
    assert math.isnan(m["time_to_adapt_s"])


def test_sample_of_operator_without_slo(tmp_path: Path) -> None:
    with pytest.raises(SummaryError, match="'Z'"):
        run_metrics(make_run(tmp_path, samples=[(0.0, "Z", 1.0)]))


def _value(df: pd.DataFrame, config: str, btu: Optional[int], metric: str, column: str = "mean") -> Any:
    rows = df[(df["config"] == config) & (df["metric"] == metric)
              & (df["btu_minutes"].isna() if btu is None else df["btu_minutes"] == btu)]
    assert len(rows) == 1, (config, btu, metric)
    return rows.iloc[0][column]


def test_summarise_means_sd_and_incomplete_runs(tmp_path: Path) -> None:
    # rep 1: A/B as above (RT 40 %); rep 2: all of A compliant (RT 70 %); lease 25 vs 45 minutes
    make_run(tmp_path, rep=1, leases=[LEASE_25_MIN])
    make_run(tmp_path, rep=2, leases=[("h1", 0.0, 2700.0, 3600.0, 1, 0, True)],
             samples=_samples({"A": [1.0] * 5, "B": B_DURATIONS, "X": X_DURATIONS}))
    make_run(tmp_path, rep=3, status="incomplete", leases=[("h1", 0.0, 7200.0, 3600.0, 2, 0, True)],
             samples=_samples({"A": [1.0] * 5, "B": [1.0] * 5}))
    make_run(tmp_path, config="btu-10", policy="btu", btu_minutes=10, leases=[("h1", 0.0, 1170.0, 600.0, 2, 1, True)])

    df = summarise(tmp_path)
    assert list(df.columns) == summary.COLUMNS
    # threshold compliance is BTU-independent: one row with empty btu_minutes, mean of 40 and 70
    assert _value(df, "threshold", None, "realtime_compliance_pct") == pytest.approx(55.0)
    assert _value(df, "threshold", None, "realtime_compliance_pct", "sd") == pytest.approx(math.sqrt(2 * 15.0 ** 2))
    assert _value(df, "threshold", None, "realtime_compliance_pct", "n") == 2
    # paid BTUs under 10-min BTUs: 3 and 5 -> mean 4, sd sqrt(2); under 60: 1 and 1 -> sd 0
    assert _value(df, "threshold", 10, "paid_btus") == pytest.approx(4.0)
    assert _value(df, "threshold", 10, "paid_btus", "sd") == pytest.approx(math.sqrt(2))
    assert _value(df, "threshold", 60, "resource_cost", "sd") == pytest.approx(0.0)
    # total RT cost under 30: rep 1 3 + 1.8, rep 2 (2 BTUs) 6 + 0.0001 x 30,000 x 0.3 = 6.9
    assert _value(df, "threshold", 30, "realtime_total_cost") == pytest.approx((4.8 + 6.9) / 2)
    # a BTU run's metrics all belong to its BTU; a single repetition has no sd
    assert _value(df, "btu-10", 10, "realtime_compliance_pct") == pytest.approx(40.0)
    assert math.isnan(_value(df, "btu-10", 10, "realtime_compliance_pct", "sd"))
    assert _value(df, "btu-10", 10, "resource_cost") == pytest.approx(2.0)
    assert set(df.loc[df["config"] == "btu-10", "btu_minutes"]) == {10}
    assert set(df["approach"]) == {"threshold", "btu"}

    incomplete = str(run_dir_for(tmp_path, "stepwise", "threshold", 3))
    assert df.attrs["incomplete_runs"] == [incomplete]
    listed = incomplete_runs(tmp_path)
    assert listed["run_dir"].tolist() == [incomplete] and listed["status"].tolist() == ["incomplete"]


def test_summary_is_deterministic(tmp_path: Path) -> None:
    make_run(tmp_path, rep=1, leases=[LEASE_25_MIN])
    make_run(tmp_path, config="btu-10", policy="btu", btu_minutes=10, leases=[("h1", 0.0, 1170.0, 600.0, 2, 1, True)])
    df = summarise(tmp_path)
    text = format_summary(df)
    assert format_summary(df.iloc[::-1].reset_index(drop=True)) == text
    lines = text.splitlines()
    assert lines[0] == "pattern: stepwise"
    assert [line.split()[0] for line in lines[3:]] == ["threshold@10", "threshold@30", "threshold@60", "btu-10"]
    assert summarise(tmp_path).equals(df)


def test_format_summary_shows_sd(tmp_path: Path) -> None:
    make_run(tmp_path, rep=1, leases=[LEASE_25_MIN])
    make_run(tmp_path, rep=2, leases=[("h1", 0.0, 2700.0, 3600.0, 1, 0, True)])
    row = next(line for line in format_summary(summarise(tmp_path)).splitlines() if line.startswith("threshold@10"))
    assert "40.0" in row and "4.00 ±1.41" in row  # resource cost 3 and 5 under 10-min BTUs


def test_format_summary_reads_the_reference_table() -> None:
    # only the first six fields: one note in the reference contains an unquoted comma
    rows = [line.split(",")[:6] for line in REFERENCE.read_text().splitlines() if line]
    reference = pd.DataFrame(rows[1:], columns=rows[0])
    for column in ("mean", "sd"):
        reference[column] = pd.to_numeric(reference[column], errors="coerce")
    text = format_summary(reference)
    stepwise = text.split("\n\n")[[b.splitlines()[0] for b in text.split("\n\n")].index("pattern: stepwise")]
    labels = [line.split()[0] for line in stepwise.splitlines()[3:]]
    assert labels == ["threshold@10", "threshold@30", "threshold@60", "btu-10", "btu-30", "btu-60"]
    threshold60 = stepwise.splitlines()[5]
    assert "40.0 ±1.0" in threshold60 and "120.00 ±6.00" in threshold60


def test_missing_or_empty_runs_folder(tmp_path: Path) -> None:
    with pytest.raises(SummaryError, match=re.escape(str(tmp_path / "nowhere"))):
        summarise(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SummaryError, match=re.escape(str(tmp_path / "empty"))):
        summarise(tmp_path / "empty")


def test_main_prints_and_writes_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_run(tmp_path, rep=1, leases=[LEASE_25_MIN])
    make_run(tmp_path, rep=2, status="incomplete")
    assert summary.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "threshold@60" in out and "not complete" in out
    written = pd.read_csv(tmp_path / "summary.csv")
    assert list(written.columns) == summary.COLUMNS
    assert summary.main([str(tmp_path / "nowhere")]) == 2  # a bad argument, as for the report


def test_each_row_names_the_backend_its_runs_manifests_name(tmp_path):
    make_run(tmp_path, config="btu-10", policy="btu", btu_minutes=10)
    make_run(tmp_path, config="btu-10-live", policy="btu", btu_minutes=10, backend="docker")
    df = summarise(tmp_path)
    assert dict(zip(df["config"], df["backend"], strict=True)) == {"btu-10": "sim", "btu-10-live": "docker"}
