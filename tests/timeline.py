"""Where a test run's time went: `python -m tests.timeline FILE` reads the lines the test session wrote
to TESTBED_TEST_TIMELINE (worker, start, end, test) and prints each worker's span and busy time, each
lane's busy time (tests/conftest.py `lane`) and the slowest files. CI prints it after the summary, so
that the lane that sets CI's length is named in every run's output."""
from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Tuple

Row = Tuple[str, float, float, str]


def read(path: Path) -> List[Row]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split("\t")
        if len(parts) == 4:  # a line cut short by a killed worker is skipped
            rows.append((parts[0], float(parts[1]), float(parts[2]), parts[3]))
    return rows


def lane_of(nodeid: str) -> str:
    from tests.conftest import lane
    name = lane(nodeid)
    return name if name in ("services", "engines") else "other"


def report(rows: List[Row], files: int = 12) -> str:
    if not rows:
        return "timeline: no tests recorded"
    t0 = min(r[1] for r in rows)
    out = [f"timeline: {len(rows)} tests, {max(r[2] for r in rows) - t0:.0f} s from the first start to the last end"]
    workers: Dict[str, List[Row]] = defaultdict(list)
    for row in rows:
        workers[row[0]].append(row)
    for worker, rs in sorted(workers.items()):
        busy = sum(r[2] - r[1] for r in rs)
        out.append(f"  {worker}: {len(rs)} tests, {min(r[1] for r in rs) - t0:.0f}-{max(r[2] for r in rs) - t0:.0f} s, "
                   f"busy {busy:.0f} s")
    lanes: Dict[str, float] = defaultdict(float)
    per_file: Dict[str, float] = defaultdict(float)
    for _, start, end, nodeid in rows:
        lanes[lane_of(nodeid)] += end - start
        per_file[nodeid.split("::")[0]] += end - start
    out.append("  lanes: " + ", ".join(f"{name} {busy:.0f} s" for name, busy in sorted(lanes.items())))
    out.append("  slowest files:")
    for name, busy in sorted(per_file.items(), key=lambda kv: -kv[1])[:files]:
        out.append(f"    {busy:7.0f} s  {name}")
    return "\n".join(out)


if __name__ == "__main__":
    print(report(read(Path(sys.argv[1]))))
