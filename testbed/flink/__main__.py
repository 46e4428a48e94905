"""`python -m testbed.flink run`: one WordCount cluster for a while, one JSON line per reading.

    python -m testbed.flink run --rate 200 --taskmanagers 2 --seconds 60 --work-dir /tmp/flink-run

Lines: {"event": "started", "pids": [...]} once every process is launched, then one
{"event": "reading", ...} per --every seconds. Ctrl-C (or any error) stops every Flink process."""
from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import tempfile
import time
from pathlib import Path

from testbed.flink.cluster import FlinkCluster
from testbed.flink.schedule import RateSchedule
from testbed.flink.settings import FlinkSettingsError, from_mapping


def _args(argv):
    p = argparse.ArgumentParser(prog="python -m testbed.flink", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run WordCount at a constant rate")
    run.add_argument("--rate", type=float, default=100.0, help="records (sentences) per second")
    run.add_argument("--taskmanagers", type=int, default=1)
    run.add_argument("--seconds", type=float, default=60.0, help="how long to read once started")
    run.add_argument("--every", type=float, default=1.0, help="seconds between readings")
    run.add_argument("--work-dir", type=Path, default=None, help="config, logs, checkpoints (default: a temp dir)")
    run.add_argument("--no-wait", action="store_true", help="print the pids as soon as the processes are launched")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="a setting (testbed/flink/settings.py)")
    return p.parse_args(argv)


def _emit(event: str, **fields) -> None:
    print(json.dumps({"event": event, **fields}, default=str), flush=True)


def run(args) -> int:
    try:
        settings = from_mapping(dict(kv.split("=", 1) for kv in args.set))
    except (FlinkSettingsError, ValueError) as e:
        print(f"python -m testbed.flink: {e}", file=sys.stderr)
        return 2
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="testbed-flink-"))
    with FlinkCluster(settings, RateSchedule.constant(args.rate), work_dir) as cluster:
        if args.no_wait:
            cluster.start_processes(args.taskmanagers)
        else:
            cluster.start()
            for _ in range(args.taskmanagers):
                cluster.add_taskmanager()
        _emit("started", pids=cluster.pids(), work_dir=str(work_dir))
        if not args.no_wait:
            cluster.wait_until(lambda r: r.parallelism == args.taskmanagers, f"parallelism {args.taskmanagers}")
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            _emit("reading", **dataclasses.asdict(cluster.read()))
            time.sleep(args.every)
    return 0


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv=None) -> int:
    # a controller started in the background may inherit SIGINT ignored: take it (and SIGTERM)
    # explicitly, so that either stops the cluster before exiting
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    args = _args(argv)
    try:
        return run(args)
    except KeyboardInterrupt:
        print("python -m testbed.flink: interrupted; every Flink process stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
