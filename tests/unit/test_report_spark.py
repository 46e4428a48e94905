"""The PySpark reporting job: exact answers on a hand-built event log, agreement with the pandas
computation (reporting.summary) on simulated logs, incomplete runs, and the HTML report rendered
in headless Chromium. One Spark session for the whole module."""
from __future__ import annotations

import base64
import dataclasses
import io
import json
import math
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pandas as pd
import pytest

from reporting.report import run_report
from reporting.report_config import ReportConfig, SparkConfig
from reporting.report_metrics import ReportMetrics, report_metrics
from reporting.run_catalog import REPORT_TABLES, RunCatalog, load_catalog
from reporting.spark_passes import collect_aggregates
from reporting.spark_session import build_session
from reporting.spark_tables import RunTables
from reporting.summary import METRICS, run_metrics, summarise
from testbed.eventlog import read_manifest, run_dir_for, write_manifest
from testbed.experiment import run_experiment
from tests.conftest import compose_config
from tests.unit.report_fixtures import BASELINE_LEASES, SLO, make_run

pytestmark = [pytest.mark.slow, pytest.mark.spark]  # a Spark JVM for the module (make test-unit leaves it out)

@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = build_session(SparkConfig(master="local[2]", shuffle_partitions=2))
    yield session
    session.stop()


def compute_metrics(spark: Any, catalog: RunCatalog, scratch: Path) -> ReportMetrics:
    """The report's metrics without the report around them: the Spark passes, then pandas."""
    with RunTables(spark, catalog, REPORT_TABLES, scratch) as tables:
        return report_metrics(catalog, collect_aggregates(catalog, tables))


def _values(per_run: pd.DataFrame, config: str, rep: int = 1,
            pattern: str = "stepwise") -> Dict[Tuple[Optional[int], str], float]:
    rows = per_run[(per_run["pattern"] == pattern) & (per_run["config"] == config) & (per_run["rep"] == rep)]
    return {(None if pd.isna(b) else int(b), m): v
            for b, m, v in zip(rows["btu_minutes"], rows["metric"], rows["value"], strict=True)}


@pytest.fixture(scope="module")
def hand_built(spark: Any, tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("hand_built")
    make_run(root, rep=1)
    # rep 2: the 25-min lease ran 45 min (5/2/1 BTUs); everything else as rep 1
    make_run(root, rep=2, leases=[("h1", 0.0, 2700.0, 3600.0, 1, 0, True), BASELINE_LEASES[1]])
    # rep 3 never finished: wildly different, must not count
    make_run(root, rep=3, status="incomplete", leases=[("h1", 0.0, 36000.0, 3600.0, 10, 9, True)],
             samples=[(0.0, "A", 1.0)])
    # BTU-10 run: h1 was prolonged just before its 2nd BTU ended, then released at 1190 s: it pays
    # the 3 BTUs stored, not the 2 that ⌈1190/600⌉ would give
    make_run(root, config="btu-10", policy="btu", btu_minutes=10, leases=[("h1", 0.0, 1190.0, 600.0, 3, 2, True)],
             actions=["lease", "prolong", "prolong", "release"])
    # another pattern whose topology has other SLOs and service times: the per-run lookups differ
    make_run(root, pattern="two_level", slo={"A": 200.0, "B": 100.0, "X": 500.0}, service_mean_ms=20.0)
    catalog = load_catalog(root)
    return root, catalog, compute_metrics(spark, catalog, root)


def test_hand_built_compliance_is_exact(hand_built) -> None:
    _, _, metrics = hand_built
    v = _values(metrics.per_run, "threshold")
    assert (v[(None, "realtime_compliance_pct")], v[(None, "near_realtime_compliance_pct")],
            v[(None, "relaxed_compliance_pct")]) == (37.5, 62.5, 75.0)
    assert (v[(None, "realtime_compliance_all_pct")], v[(None, "near_realtime_compliance_all_pct")],
            v[(None, "relaxed_compliance_all_pct")]) == (43.75, 56.25, 62.5)
    per_operator = {op: tuple(v[(None, f"{lv}_compliance_{op}_pct")] for lv in ("realtime", "near_realtime", "relaxed"))
                    for op in SLO}
    assert per_operator == {"A": (25.0, 50.0, 75.0), "B": (50.0, 75.0, 75.0), "X": (50.0, 50.0, 50.0)}


def test_hand_built_costs_penalty_and_time_to_adapt_are_exact(hand_built) -> None:
    _, _, metrics = hand_built
    v = _values(metrics.per_run, "threshold")
    assert v[(None, "processed_items")] == 10_000
    # penalty = 0.0001 x 10,000 items x violation share (headline): 5/8, 3/8, 2/8
    assert (v[(None, "realtime_penalty")], v[(None, "near_realtime_penalty")],
            v[(None, "relaxed_penalty")]) == (0.625, 0.375, 0.25)
    # the baseline's two leases re-billed: 10 min -> 3 + 6 BTUs x 1; 30 -> 1 + 2 BTUs x 3; 60 -> 1 + 1 x 6
    assert {b: (v[(b, "paid_btus")], v[(b, "resource_cost")]) for b in (10, 30, 60)} == {
        10: (9.0, 9.0), 30: (3.0, 9.0), 60: (2.0, 12.0)}
    assert {b: v[(b, "realtime_total_cost")] for b in (10, 30, 60)} == {10: 9.625, 30: 9.625, 60: 12.625}
    assert v[(60, "relaxed_total_cost")] == 12.25
    # h1 leaves 5 min of a paid 10/30-min BTU (35 min of a 60-min BTU) unused: early; h2 none
    assert [v[(b, "vm_early_releases")] for b in (10, 30, 60)] == [1.0, 1.0, 1.0]
    assert v[(None, "time_to_adapt_s")] == 2.0
    assert (v[(None, "time_to_adapt_B_s")], v[(None, "time_to_adapt_X_s")]) == (2.0, 2.0)
    assert math.isnan(v[(None, "time_to_adapt_A_s")])  # A's only episode is still open at the end
    counts = {k: v[(None, k)]
              for k in ("vm_leases", "vm_prolongations", "vm_releases", "scale_ups", "scale_downs", "migrations")}
    assert counts == {"vm_leases": 2, "vm_prolongations": 0, "vm_releases": 2, "scale_ups": 3, "scale_downs": 1,
                      "migrations": 1}

    btu = _values(metrics.per_run, "btu-10")
    assert set(b for b, _ in btu) == {10}  # a BTU run's metrics all belong to its BTU
    assert (btu[(10, "paid_btus")], btu[(10, "resource_cost")], btu[(10, "realtime_total_cost")]) == (3.0, 3.0, 3.625)
    assert btu[(10, "vm_early_releases")] == 1.0  # 610 s of paid time left > 60 s window
    assert btu[(10, "vm_prolongations")] == 2.0


def test_hand_built_elasticity(hand_built) -> None:
    _, _, metrics = hand_built
    v = _values(metrics.per_run, "threshold")
    # demand 1,2,2,1,3,1 vs supply 1,1,2,2,3,3 over six 10-s intervals (T = 60 s)
    assert v[(None, "elasticity_under_accuracy_pct")] == pytest.approx(100 * 5 / 60)  # (2-1)/2 x 10 s
    assert v[(None, "elasticity_over_accuracy_pct")] == pytest.approx(100 * 30 / 60)  # 1/1 x 10 + 2/1 x 10
    assert v[(None, "elasticity_under_timeshare_pct")] == pytest.approx(100 * 10 / 60)
    assert v[(None, "elasticity_over_timeshare_pct")] == pytest.approx(100 * 20 / 60)
    # supply and demand move apart in 4 of the 5 later intervals (together only at t=50: both up)
    assert v[(None, "elasticity_instability_pct")] == pytest.approx(80.0)
    assert v[(None, "elasticity_instability_A_pct")] == pytest.approx(80.0)
    assert v[(None, "mean_demand_instances")] == pytest.approx(10 / 6)
    assert v[(None, "mean_supply_instances")] == pytest.approx(2.0)
    assert v[(None, "mean_instances")] == pytest.approx(2.0)
    assert v[(None, "mean_leased_vms")] == pytest.approx(10 / 6)
    # A at 20 ms per item: 50 items/s per instance, so demand doubles: 2,4,4,2,6,2 against 1,1,2,2,3,3
    other = _values(metrics.per_run, "threshold", pattern="two_level")
    assert other[(None, "mean_demand_instances")] == pytest.approx(20 / 6)
    assert other[(None, "elasticity_under_timeshare_pct")] == pytest.approx(100 * 40 / 60)


def test_hand_built_means_exclude_the_incomplete_run(hand_built) -> None:
    root, catalog, metrics = hand_built
    assert [str(r.run_dir)
            for r in catalog.incomplete] == [str(run_dir_for(root, "stepwise", "threshold", 3).resolve())]
    s = metrics.summary
    row = s[(s["config"] == "threshold") & (s["btu_minutes"] == 10) & (s["metric"] == "resource_cost")].iloc[0]
    assert (row["mean"], row["n"]) == (10.0, 2)  # 9 and 11: the incomplete run's 60 BTUs are left out
    assert row["sd"] == pytest.approx(math.sqrt(2.0))
    rt = s[(s["config"] == "threshold") & s["btu_minutes"].isna() & (s["metric"] == "realtime_compliance_pct")].iloc[0]
    assert (rt["mean"], rt["sd"], rt["n"]) == (37.5, 0.0, 2)


def test_hand_built_matches_pandas(hand_built) -> None:
    root, _, metrics = hand_built
    for pattern, config, rep in (("stepwise", "threshold", 1), ("stepwise", "threshold", 2), ("stepwise", "btu-10", 1),
                                 ("two_level", "threshold", 1)):
        expected = run_metrics(run_dir_for(root, pattern, config, rep))
        got = _values(metrics.per_run, config, rep, pattern)
        own = 10 if config == "btu-10" else None
        for name in METRICS:
            if name in expected:
                assert got[(own, name)] == expected[name], name
        for b, costs in expected["by_btu"].items():
            for name, value in costs.items():
                assert got[(b, name)] == value, (b, name)


# ---- simulated runs: Spark against pandas, the whole report, the browser ----------------------------

@pytest.fixture(scope="module")
def simulated(spark: Any, tmp_path_factory: pytest.TempPathFactory):
    """The paper's matrix for 20 simulated minutes, 2 repetitions, plus one run marked incomplete;
    reported once (with figures) for the tests below."""
    root = tmp_path_factory.mktemp("simulated")
    cfg = compose_config("pattern=stepwise", "reps=2", "duration_min=20", f"out={root}", "summary=false")
    run_experiment(cfg)
    runs = root / "stepwise"
    source, broken = run_dir_for(root, "stepwise", "threshold", 1), run_dir_for(root, "stepwise", "threshold", 3)
    shutil.copytree(source, broken)
    manifest = dataclasses.replace(read_manifest(source), rep=3, status="incomplete", error="KeyboardInterrupt: test")
    write_manifest(broken, manifest)
    result = run_report(runs, ReportConfig(out=str(root / "report")), spark=spark)
    return runs, result


def test_spark_matches_pandas_on_simulated_runs(simulated) -> None:
    runs, result = simulated
    expected = summarise(runs)
    keys = ["pattern", "approach", "config", "btu_minutes", "metric"]
    got = result.metrics.summary
    assert set(METRICS) <= set(got["metric"])
    joined = expected.merge(got, on=keys, how="left", suffixes=("_pandas", "_spark"), validate="one_to_one")
    assert len(joined) == len(expected) and not joined["n_spark"].isna().any()
    assert (joined["n_pandas"] == joined["n_spark"]).all()
    for column in ("mean", "sd"):
        a, b = joined[f"{column}_pandas"].to_numpy(float), joined[f"{column}_spark"].to_numpy(float)
        both_nan = pd.isna(a) & pd.isna(b)
        close = abs(a - b) <= 1e-9 * abs(a) + 1e-9
        mismatched = joined.loc[~(both_nan | close), keys + [f"{column}_pandas", f"{column}_spark"]]
        assert mismatched.empty, mismatched.to_string()
    # the incomplete third repetition counts nowhere (n = 0: e.g. an operator without any episode)
    assert set(got["n"]) <= {0, 2} and (got.loc[got["metric"].isin(METRICS), "n"] == 2).all()


def test_report_files_and_incomplete_run(simulated) -> None:
    runs, result = simulated
    out = result.out
    results = pd.read_csv(out / "tables" / "results.csv")
    assert list(results.columns[:6]) == ["pattern", "approach", "btu_minutes", "metric", "mean", "sd"]
    reference = pd.read_csv(Path(__file__).resolve().parents[2] / "experiments" / "reference" / "paper_btu_results.csv")
    keys = ["pattern", "approach", "btu_minutes", "metric"]
    joined = reference[reference["pattern"] == "stepwise"].merge(results, on=keys, how="left")
    assert not joined["mean_y"].isna().any()  # every published value has its measured counterpart
    claims = pd.read_csv(out / "tables" / "claims.csv")
    assert len(claims) == 4 and set(claims["measured"]) <= {"holds", "does not hold", "not evaluable"}
    runs_csv = pd.read_csv(out / "tables" / "runs.csv")
    assert len(runs_csv) == 9
    assert runs_csv.loc[runs_csv["status"] == "incomplete", "rep"].tolist() == [3]
    md = (out / "report.md").read_text()
    assert "1 incomplete run(s)" in md and "KeyboardInterrupt: test" in md
    assert read_manifest(run_dir_for(runs.parent, "stepwise", "btu-10", 1)).code_revision in md
    profile = read_manifest(run_dir_for(runs.parent, "stepwise", "btu-10", 1)).resolved_config["profile"]
    assert f"on profile {profile}" in md  # which profile produced the numbers
    for png in (out / "figures").glob("*.png"):
        assert f"figures/{png.name}" in md
    assert {p.name for p in (out / "figures").glob("*.png")} == {
        "arrival_patterns.png", "timeseries_stepwise.png", "durations_stepwise.png",
        "compliance_vs_paper.png", "cost_vs_paper.png"}
    assert set(result.timings) == {"spark_start_s", "compute_s", "render_s"}


# ---- headless Chromium ------------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)


def _chromium() -> str:
    if CHROMIUM:
        return CHROMIUM
    if os.environ.get("CI"):
        pytest.fail("CI is set but Debian's chromium is not installed (.ci/run installs it)")
    pytest.skip("needs Debian's chromium (/usr/bin/chromium; apt-get install -y chromium)")


def _live_members(pgid: int) -> List[int]:
    """Processes of a process group still running (zombies count as ended: this machine's init may never reap them)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited while listed
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def _stop_process_group(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    """SIGTERM the browser's whole group, SIGKILL what is left after the grace period, and wait for all of it."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            proc.poll()
            if proc.returncode is not None and not _live_members(proc.pid):
                return
            time.sleep(0.05)
    raise AssertionError(f"chromium's processes {_live_members(proc.pid)} survived SIGKILL")


class DevTools:
    """The smallest Chrome DevTools Protocol client the test needs: send a command, await its answer."""

    def __init__(self, ws_url: str):
        import websocket

        self.ws = websocket.create_connection(ws_url, timeout=60, suppress_origin=True)
        self.next_id = 0
        self.events: List[str] = []  # methods of events that arrived while awaiting an answer

    def call(self, method: str, **params: Any) -> Dict[str, Any]:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]
            if "method" in message:
                self.events.append(message["method"])

    def wait_for(self, event: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while event not in self.events:
            if time.monotonic() > deadline:
                raise TimeoutError(event)
            message = json.loads(self.ws.recv())
            if "method" in message:
                self.events.append(message["method"])


@pytest.mark.browser
def test_index_html_renders_in_headless_chromium(simulated) -> None:
    binary = _chromium()
    _, result = simulated
    index = result.out / "index.html"
    with tempfile.TemporaryDirectory() as profile:
        # Its own process group: chromium's helpers (zygote, renderer, GPU) outlive the browser process
        # for a moment and keep writing into the profile, so all of them are stopped before it is removed.
        proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--disable-breakpad", "--no-first-run",
             f"--user-data-dir={profile}", "--remote-debugging-port=0", "--remote-allow-origins=*",
             "--window-size=1400,1000", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            port_file = Path(profile) / "DevToolsActivePort"
            deadline = time.monotonic() + 60
            while not (port_file.exists() and port_file.read_text().strip()):
                assert proc.poll() is None, f"chromium exited with {proc.returncode}"
                assert time.monotonic() < deadline, "chromium did not open its DevTools port"
                time.sleep(0.1)
            port = int(port_file.read_text().split()[0])
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as answer:
                page = next(t for t in json.load(answer) if t["type"] == "page")
            tools = DevTools(page["webSocketDebuggerUrl"])
            tools.call("Page.enable")
            tools.call("Page.navigate", url=index.as_uri())
            tools.wait_for("Page.loadEventFired")
            probe = """JSON.stringify({
                tables: Array.from(document.querySelectorAll('table')).map(t => [t.rows.length, t.offsetHeight]),
                images: Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight]),
                title: document.title})"""
            page_state = json.loads(tools.call("Runtime.evaluate", expression=probe,
                                               returnByValue=True)["result"]["value"])
            shot = base64.b64decode(tools.call("Page.captureScreenshot", format="png")["data"])
        finally:
            _stop_process_group(proc)
    figures = list((result.out / "figures").glob("*.png"))
    assert len(page_state["images"]) == len(figures) == 5
    assert all(complete and w > 0 and h > 0 for complete, w, h in page_state["images"]), page_state["images"]
    assert len(page_state["tables"]) >= 8
    assert all(rows > 1 and height > 0 for rows, height in page_state["tables"]), page_state["tables"]
    assert page_state["title"].startswith("Experiment report")

    from PIL import Image

    image = Image.open(io.BytesIO(shot)).convert("L")
    histogram = image.histogram()
    non_white = sum(histogram[:250]) / sum(histogram)
    assert image.size[0] > 0 and len([c for c in histogram if c]) > 10 and non_white > 0.01  # not a blank page


# ---- damaged run folders ----------------------------------------------------------------------------

def test_damaged_runs_are_left_out_with_their_reason_and_exit_3(spark: Any, tmp_path: Path, monkeypatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """One unreadable run folder does not lose the report of the others: it is listed with its reason
    (report, runs.csv, stderr) and the command exits 3."""
    from reporting import report

    root = tmp_path / "runs"
    make_run(root, rep=1)
    make_run(root, rep=2)
    truncated = make_run(root, rep=3)
    data = (truncated / "samples.parquet").read_bytes()
    (truncated / "samples.parquet").write_bytes(data[:len(data) // 2])
    missing = make_run(root, rep=4)
    (missing / "leases.parquet").unlink()
    corrupt = make_run(root, rep=5)
    (corrupt / "manifest.json").write_text('{"run_id": "stepwise/threshold/5", "stat')
    real_run_report = report.run_report
    monkeypatch.setattr(report, "run_report", lambda runs_dir, cfg,
                        say=None: real_run_report(runs_dir, cfg, spark, say))
    assert report.main([str(root), "figures=false"]) == report.EXIT_DAMAGED
    err = capsys.readouterr().err
    for folder, reason in ((truncated, "samples.parquet"), (missing, "leases.parquet"), (corrupt, "manifest.json")):
        assert f"damaged, left out of the report: {folder}: " in err and reason in err
    assert "Traceback" not in err
    runs_csv = pd.read_csv(root / "report" / "tables" / "runs.csv")
    assert sorted(runs_csv.loc[runs_csv["status"] == "damaged", "run_dir"]) == sorted(
        str(p) for p in (truncated, missing, corrupt))
    assert sorted(runs_csv.loc[runs_csv["status"] == "complete", "rep"].astype(int)) == [1, 2]
    markdown = (root / "report" / "report.md").read_text()
    assert "Damaged runs (left out of the report)" in markdown and "3 damaged run folder(s) left out" in markdown
    results = pd.read_csv(root / "report" / "tables" / "results.csv")
    assert set(results["n"]) <= {0, 2}  # the two readable repetitions, nothing of the damaged ones
