"""What a real Flink 2.3 in reactive mode costs on this machine, with the project's WordCount
(docs/flink.md#measured). Two clusters, one after the other:

* timings, at a low rate (--rate, LOW_RATE sentences/s): the JobManager's start, each TaskManager's
  registration, the first start of the job, the rescale 1 -> 2 (registration -> running at 2, and
  the downtime), the catch-up after it, a graceful scale-in 2 -> 1 (SIGTERM), a killed one (SIGKILL:
  its closed connections give it away), a frozen one (SIGSTOP: only the heartbeat timeout finds
  it), the latency floor and each JVM's memory;
* capacity: a schedule far above what the job carries, so the source is always behind; the rate
  counted at parallelism 1 (one TaskManager, which also runs the source), then at 2.

    flock /tmp/testbed-flink.lock .venv/bin/python benchmarks/bench_flink.py [--out FILE.json] [--set KEY=VALUE]
        [--only timings|capacity] [--rate SENTENCES_PER_S]

Prints one line per figure and writes them with the settings as JSON (--out). Needs
`bash infra/flink.sh build`; take the lock so no other Flink cluster runs meanwhile.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testbed.flink import processes  # noqa: E402
from testbed.flink.cluster import FlinkCluster  # noqa: E402
from testbed.flink.metrics import JobReading  # noqa: E402
from testbed.flink.schedule import RateSchedule  # noqa: E402
from testbed.flink.settings import FlinkSettings, from_mapping  # noqa: E402

LOW_RATE = 100.0
FLOOD_RATE = 1e6  # sentences/s: never reached, the source is always behind
BENCH = dict(checkpoint_s=2.0, stabilization_s=1.0, cooldown_s=1.0, heartbeat_interval_s=1.0,
             heartbeat_timeout_s=10.0, restart_delay_s=0.5)


class Probe:
    """Polls the cluster and keeps every reading (with the time it took)."""

    def __init__(self, cluster: FlinkCluster):
        self.cluster = cluster
        self.log: List[JobReading] = []

    def read(self) -> JobReading:
        r = self.cluster.read()
        self.log.append(r)
        return r

    def until(self, ok, what: str, timeout_s: Optional[float] = None) -> float:
        """Seconds until `ok` holds (polled every 0.1 s)."""
        t = self.cluster.now()
        r = self.cluster.wait_until(ok, what, timeout_s=timeout_s, read=self.read, every_s=0.1)
        return r.t - t

    def watch(self, seconds: float) -> List[JobReading]:
        end, out = self.cluster.now() + seconds, []
        while self.cluster.now() < end:
            out.append(self.read())
            time.sleep(0.5)
        return out

    def downtime(self, since: float) -> float:
        """Longest stretch after `since` in which the job was not running (no parallelism)."""
        longest, down_from = 0.0, None
        for r in (r for r in self.log if r.t >= since):
            if r.parallelism == 0 and down_from is None:
                down_from = r.t
            elif r.parallelism and down_from is not None:
                longest, down_from = max(longest, r.t - down_from), None
        return longest


def at(p: int):
    return lambda r: r.parallelism == p and r.subtask_count() == p


def registered(name: str):
    return lambda r: name in r.registered


def scale_out(probe: Probe, fig: Dict[str, float], p: int, tag: str) -> None:
    t = probe.cluster.now()
    name = probe.cluster.add_taskmanager()
    fig[f"tm_registration_s[{name}]"] = probe.until(registered(name), f"{name} registered")
    fig[f"rescale_to_{p}_after_registration_s[{tag}]"] = probe.until(at(p), f"parallelism {p}")
    fig[f"rescale_to_{p}_downtime_s[{tag}]"] = probe.downtime(t)
    catch_up(probe, fig, tag)


def catch_up(probe: Probe, fig: Dict[str, float], tag: str) -> None:
    """The backlog a restart left (downtime's arrivals + the replay since the checkpoint: due and not
    yet counted, in-flight buffers included) and how long the job took to work it off once running
    again (back to at most a quarter second of arrivals)."""
    t = probe.cluster.now()
    wps = probe.cluster.settings.words_per_sentence
    probe.until(lambda r: r.backlog(wps) <= LOW_RATE * 0.25, "the backlog caught up")
    backlog = [r.backlog(wps) for r in probe.log if r.t >= t - 0.5 and r.source]
    fig[f"backlog_after_restart_sentences[{tag}]"] = max(backlog, default=0.0)
    fig[f"catch_up_s[{tag}]"] = probe.log[-1].t - t


def scale_in(probe: Probe, fig: Dict[str, float], mode: str) -> None:
    t = probe.cluster.now()
    name = list(probe.cluster.taskmanagers)[-1]
    probe.cluster.stop_taskmanager(name, mode=mode)
    fig[f"scale_in_{mode}_s"] = probe.until(at(1), f"parallelism 1 after the {mode} stop")
    fig[f"scale_in_{mode}_downtime_s"] = probe.downtime(t)
    catch_up(probe, fig, f"scale-in {mode}")


def scale_in_frozen(probe: Probe, fig: Dict[str, float]) -> None:
    """A TaskManager that stops answering without closing its connections (SIGSTOP: a hung JVM,
    or a network cut): only the heartbeat timeout finds it. It is SIGKILLed afterwards."""
    t = probe.cluster.now()
    name = list(probe.cluster.taskmanagers)[-1]
    proc = probe.cluster.taskmanagers.pop(name)  # not scraped meanwhile: a frozen endpoint only times out
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        timeout = probe.cluster.settings.heartbeat_timeout_s + probe.cluster.settings.start_timeout_s
        fig["scale_in_frozen_s"] = probe.until(at(1), "parallelism 1 after the freeze", timeout_s=timeout)
        fig["scale_in_frozen_downtime_s"] = probe.downtime(t)
    finally:
        processes.stop(proc, graceful=False, timeout_s=0)


def latency_floor(probe: Probe, fig: Dict[str, float]) -> None:
    readings = [r for r in probe.watch(15.0) if r.taskmanagers]
    readings = [r for r in readings if r.source is not None and r.source.pending <= LOW_RATE]
    p50 = [st.latency_p50_ms for r in readings for tm in r.taskmanagers for st in tm.subtasks]
    p95 = [st.latency_p95_ms for r in readings for tm in r.taskmanagers for st in tm.subtasks]
    fig["latency_p50_ms_at_low_rate"] = statistics.median(p50)
    fig["latency_p95_ms_at_low_rate"] = statistics.median(p95)


def memory(cluster: FlinkCluster, fig: Dict[str, float]) -> None:
    procs = [cluster.jobmanager] + list(cluster.taskmanagers.values())
    for p in procs:
        fig[f"rss_mb[{p.name}]"] = round(p.rss_mb() or 0.0, 1)
        fig[f"cpu_s_so_far[{p.name}]"] = round(p.cpu_s() or 0.0, 1)


def timings(settings: FlinkSettings, work: Path) -> Dict[str, float]:
    fig: Dict[str, float] = {}
    with FlinkCluster(settings, RateSchedule.constant(LOW_RATE), work / "timings") as cluster:
        probe = Probe(cluster)
        t = time.monotonic()
        cluster.start()
        fig["jobmanager_rest_up_s"] = time.monotonic() - t
        name = cluster.add_taskmanager()
        fig[f"tm_registration_s[{name}]"] = probe.until(registered(name), f"{name} registered")
        fig["first_start_after_registration_s"] = probe.until(at(1), "parallelism 1")
        latency_floor(probe, fig)
        memory(cluster, fig)
        scale_out(probe, fig, 2, "first")
        scale_in(probe, fig, "graceful")
        scale_out(probe, fig, 2, "second")
        scale_in(probe, fig, "kill")
        scale_out(probe, fig, 2, "third")
        scale_in_frozen(probe, fig)
    return fig


def capacity(settings: FlinkSettings, work: Path, seconds: float = 20.0) -> Dict[str, float]:
    fig: Dict[str, float] = {}
    with FlinkCluster(settings, RateSchedule.constant(FLOOD_RATE), work / "capacity") as cluster:
        probe = Probe(cluster)
        cluster.start()
        for p in (1, 2):
            cluster.add_taskmanager()
            probe.until(at(p), f"parallelism {p}")
            probe.watch(5.0)  # warm-up (JIT, the restart's replay)
            fig.update(throughput(probe, cluster, p, seconds))
    return fig


def throughput(probe: Probe, cluster: FlinkCluster, p: int, seconds: float) -> Dict[str, float]:
    cpu0 = {n: tm.cpu_s() for n, tm in cluster.taskmanagers.items()}
    readings = [r for r in probe.watch(seconds) if r.parallelism == p and r.source]
    a, b = readings[0], readings[-1]
    rate = (b.source.emitted - a.source.emitted) / (b.t - a.t)
    busy = [st.busy_ms_per_s for r in readings for tm in r.taskmanagers for st in tm.subtasks]
    out = {f"capacity_p{p}_sentences_per_s": round(rate, 1),
           f"capacity_p{p}_words_per_s": round(rate * cluster.settings.words_per_sentence, 1),
           f"capacity_p{p}_count_busy_ms_per_s_median": statistics.median(busy) if busy else float("nan")}
    for n, tm in cluster.taskmanagers.items():
        out[f"capacity_p{p}_cpu_cores[{n}]"] = round(((tm.cpu_s() or 0) - (cpu0[n] or 0)) / (b.t - a.t), 2)
    return out


def main(argv=None) -> int:
    global LOW_RATE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--only", choices=("timings", "capacity"))
    ap.add_argument("--rate", type=float, default=LOW_RATE, help="sentences/s of the timings run")
    args = ap.parse_args(argv)
    LOW_RATE = args.rate
    settings = from_mapping({**BENCH, **dict(kv.split("=", 1) for kv in args.set)})
    work = Path(tempfile.mkdtemp(prefix="bench-flink-"))
    fig: Dict[str, float] = {}
    for name, part in (("timings", timings), ("capacity", capacity)):
        if args.only in (None, name):
            fig.update(part(settings, work))
    for key, value in fig.items():
        print(f"{key:48s} {value:10.2f}")
    if args.out:
        args.out.write_text(json.dumps({"settings": settings.as_dict(), "figures": fig}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
