"""`testbed sweep` on Spark: the same sweep gives byte-identical event-log tables with the local
executor and with Spark (`local[2]`), and runs on a standalone Spark cluster started here with the
launcher shipped in PySpark (a master and a worker on loopback), which the report then reads."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Dict, Iterator, List

import pyspark
import pytest

from testbed.sweep import parse_options, plan_sweep, run_sweep

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

GRID = ["policy=btu", "reps=1", "duration_min=15", "pattern=stepwise,two_level", "billing.btu_minutes=10,60"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tables(out: Path) -> Dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted((out / "runs").rglob("*.parquet"))}


def test_local_and_spark_executors_write_identical_tables(tmp_path):
    results = {}
    for executor in ("local", "spark"):
        out = tmp_path / executor
        overrides, options = parse_options([*GRID, f"out={out}", f"executor={executor}", "spark.master=local[2]"])
        assert run_sweep(overrides, options) == {"complete": 4, "incomplete": 0, "skipped": 0, "total": 4}
        results[executor] = tables(out)
    assert len(results["local"]) >= 4 * 8
    assert results["spark"] == results["local"]


@pytest.fixture
def standalone_spark(tmp_path) -> Iterator[str]:
    """A Spark master and one 2-core worker on loopback, from PySpark's own launcher (bin/spark-class)."""
    home = Path(pyspark.__file__).parent
    port, ui, worker_ui = free_port(), free_port(), free_port()
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "SPARK_LOG_DIR": str(tmp_path / "logs")}
    launcher = [str(home / "bin" / "spark-class")]
    logs = (tmp_path / "master.log").open("w"), (tmp_path / "worker.log").open("w")
    procs: List[subprocess.Popen] = [subprocess.Popen(
        [*launcher, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
         "--webui-port", str(ui)], env=env, stdout=logs[0], stderr=subprocess.STDOUT)]
    url = f"spark://127.0.0.1:{port}"
    try:
        procs.append(subprocess.Popen(
            [*launcher, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--cores", "2",
             "--memory", "2g", "--webui-port", str(worker_ui), "--work-dir", str(tmp_path / "work")],
            env=env, stdout=logs[1], stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 180  # two JVMs starting on a possibly busy machine
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as resp:
                    if any(w.get("state") == "ALIVE" for w in json.load(resp).get("workers", [])):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"the standalone Spark cluster did not come up; see {tmp_path}/*.log")
            time.sleep(1.0)
        yield url
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        for f in logs:
            f.close()


def test_a_sweep_on_a_standalone_cluster_is_reported(tmp_path, standalone_spark):
    from reporting.report import run_report
    from reporting.report_config import parse_overrides

    out = tmp_path / "sweep"
    cluster = [f"spark.master={standalone_spark}", "spark.conf.spark.driver.host=127.0.0.1",
               "spark.conf.spark.executor.memory=1g"]
    overrides, options = parse_options([*GRID, f"out={out}", "executor=spark", *cluster])
    assert run_sweep(overrides, options) == {"complete": 4, "incomplete": 0, "skipped": 0, "total": 4}
    # the report of the sweep, its Spark stage on the same cluster
    result = run_report(out, parse_overrides([*cluster, "figures=false"]))
    assert result.master == standalone_spark
    labels = {(r.pattern, r.config) for r in result.catalog.complete}
    assert labels == {(p, f"btu-{b}[billing.btu_minutes={b}]") for p in ("stepwise", "two_level") for b in (10, 60)}
    _, runs = plan_sweep(overrides)
    assert {r.spec.run_dir for r in runs} == {r.run_dir for r in result.catalog.complete}
