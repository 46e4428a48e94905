"""The load ramp on a real Flink TaskManager (docs/flink.md#the-load-ramp): one TaskManager in the
cpu mode (0.5 cores, 2,000 µs of CPU per word: backend=flink_cpu's settings), static parallelism 1,
the load stepped through fractions of its capacity (testbed/fidelity/ramp.py). Every reading interval
records the words counted, their latency sum, the counting task's busy time and the TaskManager
cgroup's CPU; the run's JSON feeds `benchmarks/ramp_compare.py`.

    flock /tmp/testbed-flink.lock flock /tmp/testbed-measure.lock \\
        .venv/bin/python benchmarks/flink_ramp.py --out runs/ramp/flink-1.json [--set KEY=VALUE]

Needs `bash infra/flink.sh build` and a writable cgroup hierarchy (root)."""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testbed.fidelity.ramp import RampSpec  # noqa: E402
from testbed.fidelity.ramp_flink import SETTINGS, run_ramp  # noqa: E402
from testbed.flink.settings import from_mapping  # noqa: E402


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a Flink setting")
    ap.add_argument("--capacity", type=float, default=RampSpec.capacity, help="sentences/s of one TaskManager")
    ap.add_argument("--band-s", type=float, default=RampSpec.band_s)
    args = ap.parse_args(argv)
    spec = RampSpec(capacity=args.capacity, band_s=args.band_s)
    spec.validate()
    settings = from_mapping({**SETTINGS, **dict(kv.split("=", 1) for kv in args.set)})
    t0 = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    result = run_ramp(spec, settings, Path(tempfile.mkdtemp(prefix="flink-ramp-")) / "flink")
    result["started_utc"] = t0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=str))
    print(f"{args.out}: {len(result['intervals'])} intervals, load average {result['load_average']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
