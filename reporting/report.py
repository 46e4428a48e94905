"""The reporting job: event logs of a runs folder -> tables, figures, index.html and report.md.

    testbed report RUNS_DIR [out=DIR] [spark.master=local[2]] [figures=false] ...

Output (default RUNS_DIR/report/):
    tables/results.csv          mean/sd/n per configuration, long format of the paper's table (+ more metrics)
    tables/run_metrics.csv      the same metrics per run
    tables/paper_comparison.csv paper vs measured per published value
    tables/claims.csv           the paper's claims: holds / does not hold, on the paper's and the measured numbers
    tables/live_gap.csv         configurations run both simulated (X) and live (X-live): the gap per metric
    tables/runs.csv, tables/manifests.json   the runs covered (complete and incomplete) and their manifests
    figures/*.png, index.html (self-contained), report.md

One Spark session per report, started in the background once the run folders' manifests and table
schemas are read (a folder with nothing to report fails at once, without a JVM); the heavy
work (all tables of all runs) happens in Spark, in a few passes collected together
(reporting.spark_passes); metrics and figures are computed from those small results in pandas.
"""
from __future__ import annotations

import json
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Union

from reporting.evaluations import SectionInputs, compare_all, report_for, reports_for
from reporting.fidelity_gaps import BTU_CELLS
from reporting.fidelity_section import acceptance_gaps, fidelity_section, load_fidelity
from reporting.figure_data import FigureData, figure_data
from reporting.figure_drawing import FigureWorkers
from reporting.html_report import write_html
from reporting.live_gap import add_extras, config_differences, live_gap, profiles, run_sides
from reporting.live_gap import sections as live_gap_sections
from reporting.markdown_report import write_markdown
from reporting.report_config import ReportConfig, ReportConfigError, parse_overrides
from reporting.report_document import build_document, config_order
from reporting.report_metrics import ReportMetrics, report_metrics
from reporting.run_catalog import (
    EXIT_BAD_INPUT,
    EXIT_DAMAGED,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    REPORT_TABLES,
    ReportError,
    ReportInputError,
    RunCatalog,
    load_catalog,
    run_folders,
)
from reporting.spark_passes import collect_aggregates
from reporting.spark_session import SessionStart, SparkStartError
from reporting.spark_tables import RunTables

PathLike = Union[str, Path]


@dataclass
class ReportResult:
    out: Path
    catalog: RunCatalog
    metrics: ReportMetrics
    files: Dict[str, Path] = field(default_factory=dict)
    timings: Dict[str, float] = field(default_factory=dict)  # spark_start_s, compute_s, render_s
    steps: Dict[str, float] = field(default_factory=dict)  # the timings by step (seconds)
    master: str = ""


def _check_writable(out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        raise ReportInputError(f"cannot write the report to {out}: {exc}") from exc


def _write_tables(out: Path, catalog: RunCatalog, metrics: ReportMetrics, comparison, claims) -> Dict[str, Path]:
    folder = out / "tables"
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "results": folder / "results.csv",
        "run_metrics": folder / "run_metrics.csv",
        "paper_comparison": folder / "paper_comparison.csv",
        "claims": folder / "claims.csv",
        "runs": folder / "runs.csv",
        "manifests": folder / "manifests.json",
    }
    metrics.summary.to_csv(files["results"], index=False)
    metrics.per_run.to_csv(files["run_metrics"], index=False)
    comparison.to_csv(files["paper_comparison"], index=False)
    claims.to_csv(files["claims"], index=False)
    catalog.runs_frame().to_csv(files["runs"], index=False)
    manifests = {f"{r.pattern}/{r.config}/{r.rep}": {"status": r.manifest.status, "run_dir": str(r.run_dir),
                                                    **{k: v for k, v in vars(r.manifest).items()}}
                 for r in sorted([*catalog.complete, *catalog.incomplete],
                                 key=lambda r: (r.pattern, r.config, r.rep, str(r.run_dir)))}
    files["manifests"].write_text(json.dumps(manifests, indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8")
    return files


def _spark_stage(session, catalog: RunCatalog, out: Path):
    """The Spark passes over the run folders' tables, collected (the links Spark reads through are
    made in `out`, which is writable, and removed afterwards)."""
    with RunTables(session, catalog, REPORT_TABLES, scratch_parent=out) as tables:
        return collect_aggregates(catalog, tables)


def _samples_bytes(run_dirs: Sequence[Path]) -> int:
    """The size of the largest input, the samples tables: how much work the Spark stage has."""
    return sum(p.stat().st_size for d in run_dirs if (p := d / "samples.parquet").is_file())


class _Steps(dict):
    """The report's steps and their seconds; each step is told to `say` (progress) as it ends."""

    def __init__(self, say: Optional[Callable[[str], None]] = None):
        super().__init__()
        self.say = say

    def __setitem__(self, step: str, seconds: float) -> None:
        super().__setitem__(step, seconds)
        if self.say is not None:
            self.say(f"report: {step}: {seconds:.1f} s")


def run_report(runs_dir: PathLike, cfg: Optional[ReportConfig] = None, spark=None,
               say: Optional[Callable[[str], None]] = None) -> ReportResult:
    """Report the runs below runs_dir. With `spark` given, that session is used and left running
    (tests share one); otherwise one is started from cfg.spark in the background while the run
    folders are read, and stopped in the background once its results are collected. `say` is told
    each step as it ends (the command prints them)."""
    cfg = cfg or ReportConfig()
    t0 = time.perf_counter()
    dirs = run_folders(runs_dir)  # no runs, or no place to write the report: fail before Spark starts
    # manifests and table schemas (milliseconds a run): nothing reportable fails here, without a JVM
    catalog = load_catalog(runs_dir, dirs)
    out = Path(cfg.out) if cfg.out else Path(runs_dir) / "report"
    _check_writable(out)
    steps: Dict[str, float] = _Steps(say)
    steps["run folders: manifests, table schemas"] = time.perf_counter() - t0
    workers = FigureWorkers() if cfg.figures else None  # they start while Spark works
    start: Optional[SessionStart] = None
    try:
        start = SessionStart(cfg.spark, _samples_bytes(dirs)) if spark is None else None
        try:
            session = spark if start is None else start.session()
            t1 = time.perf_counter()
            steps["waiting for the Spark session"] = t1 - t0 - steps["run folders: manifests, table schemas"]
            aggregates = _spark_stage(session, catalog, out)
            master = session.sparkContext.master
            steps["Spark passes (one collect)"] = time.perf_counter() - t1
        finally:
            if start is not None:
                start.stop()  # in the background, while the rest is computed and drawn
        t2 = time.perf_counter()
        metrics = report_metrics(catalog, aggregates)
        steps["metrics"] = time.perf_counter() - t2
        t3 = time.perf_counter()
        data = figure_data(catalog, aggregates) if cfg.figures else None
        steps["figure data"] = time.perf_counter() - t3
        timings = {"spark_start_s": t1 - t0, "compute_s": time.perf_counter() - t1}
        t4 = time.perf_counter()
        files = _render(runs_dir, out, cfg, catalog, metrics, data, workers, master, steps)
        timings["render_s"] = time.perf_counter() - t4
    except BaseException:  # an interrupt among them: no half-written class archive stays behind
        if start is not None:
            start.abort()
        raise
    finally:
        if workers is not None:
            workers.close()
        if start is not None:
            start.join()
    return ReportResult(out, catalog, metrics, files, timings, steps, master)


def _render(runs_dir: PathLike, out: Path, cfg: ReportConfig, catalog: RunCatalog, metrics: ReportMetrics,
            data: Optional[FigureData], workers: Optional[FigureWorkers], master: str,
            steps: Dict[str, float]) -> Dict[str, Path]:
    """Paper comparison, claims, tables, figures, index.html and report.md (steps: seconds of the
    figures and of the documents)."""
    # each evaluation of the runs contributes its reference table, claims and sections
    entries = reports_for(r.manifest.experiment for r in catalog.complete)
    comparison, claims = compare_all(entries, metrics.summary)
    files = _write_tables(out, catalog, metrics, comparison, claims)
    fidelity = load_fidelity(Path(runs_dir))  # written by `testbed fidelity`
    extra = [fidelity_section(fidelity, comparison, claims)] if fidelity else []
    own_patterns: List[str] = []  # patterns whose platform sections an evaluation replaces
    for entry in entries:
        runs = [r for r in catalog.complete if report_for(r.manifest.experiment) is entry]
        extra += entry.sections(SectionInputs(runs, metrics.summary, comparison, claims, out, cfg.dpi))
        if not entry.platform_pattern_sections:
            own_patterns += sorted({r.pattern for r in runs})
    # a configuration run both simulated (X) and live (X-live): side by side (reporting.live_gap)
    sides = run_sides(r.manifest for r in catalog.complete)
    gaps = live_gap(add_extras(metrics.per_run, {(r.pattern, r.config, r.rep): r.run_dir for r in catalog.complete},
                               sides), sides)
    if gaps.rows or gaps.unpaired:
        files["live_gap"] = out / "tables" / "live_gap.csv"
        gaps.frame().to_csv(files["live_gap"], index=False)
        extra += live_gap_sections(gaps, profiles(catalog.complete, {(r.pattern, r.config) for r in gaps.rows}),
                                   config_differences(catalog.complete, gaps))
    if fidelity:
        files["fidelity_gaps"] = out / "tables" / "fidelity_gaps.csv"
        acceptance_gaps(comparison, fidelity.config.get("cells") or BTU_CELLS).to_csv(files["fidelity_gaps"],
                                                                                    index=False)
    t0 = time.perf_counter()
    drawn: Dict[str, Path] = {}
    if workers is not None and data is not None:
        drawn = workers.draw(out, data, comparison, config_order(metrics.summary), cfg.dpi)
    steps["figures"] = time.perf_counter() - t0
    files.update({f"figure:{k}": v for k, v in drawn.items()})
    table_files = [p for k, p in files.items() if not k.startswith("figure:")]
    doc = build_document(catalog, metrics.summary, comparison, claims, drawn, master, table_files, extra,
                         skip_patterns=own_patterns)
    files["html"] = write_html(doc, out / "index.html")
    files["markdown"] = write_markdown(doc, out / "report.md", files["manifests"])
    steps["documents"] = time.perf_counter() - t0 - steps["figures"]
    return files


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM as Ctrl-C: the report's clean-up runs instead of the process ending on the spot."""
    raise KeyboardInterrupt


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`testbed report RUNS_DIR [key=value ...]`: exit 0, or 3 when damaged runs were left out of
    the report; 2 on a bad argument (a key, no runs folder, no runs in it, every complete run
    damaged, an unwritable output folder); 1 when nothing can be reported otherwise (no complete
    run, Spark does not start)."""
    args: List[str] = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help") or "=" in args[0]:
        print("usage: testbed report RUNS_DIR [out=DIR] [figures=false] [spark.master=local[*]] "
              "[spark.<key>=...] [spark.conf.<spark key>=...]", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        cfg = parse_overrides(args[1:])
    except ReportConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    # (signal handlers belong to the main thread; called from another, SIGTERM stays as it is)
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if in_main else None
    try:
        result = run_report(args[0], cfg, say=lambda line: print(line, file=sys.stderr, flush=True))
    except ReportInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (ReportError, SparkStartError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: run_report has cancelled the class archive's dump
        print("report interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)
    _print_result(result)
    for bad in result.catalog.damaged:
        print(f"damaged, left out of the report: {bad.run_dir}: {bad.reason}", file=sys.stderr)
    return EXIT_DAMAGED if result.catalog.damaged else EXIT_OK


def _print_result(result: ReportResult) -> None:
    """What the report covers, the claims' verdicts, the timings and the files written."""
    import pandas as pd

    catalog = result.catalog
    print(f"report of {len(catalog.complete)} complete run(s) below {catalog.root}")
    for run in catalog.incomplete:
        print(f"not complete ({run.manifest.status}), excluded from the means: {run.run_dir}")
    for row in pd.read_csv(result.files["claims"]).itertuples():
        print(f"  {row.pattern:<14} {row.measured:<14} {row.text}")
    t = result.timings
    print(f"run folders and Spark start {t['spark_start_s']:.1f} s, computation {t['compute_s']:.1f} s, "
          f"figures and documents {t['render_s']:.1f} s")
    print(f"wrote {result.files['html']} and {result.files['markdown']}")


if __name__ == "__main__":
    sys.exit(main())
