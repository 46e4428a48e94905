"""Inputs per output of the operators of finished runs, from their event logs: what a live run of
O2 and O6 in incident mode measures as `topology.operators.<op>.emission.items_per_incident`, the
parameter of the simulator's incident process (docs/architecture.md#emission).

    .venv/bin/python -m reporting.incidents RUNS_DIR [RUNS_DIR ...] [--operators O2,O6]

Every complete run below the folders counts (a live run's folder, a workload folder of several
runs): per operator the items it processed (`processed` table) and the items it emitted (`edges`
from it to its first downstream operator: each emission goes to every downstream operator once),
summed over the runs, and their ratio. The last line is the overrides that give the simulator the
measured values of the operators asked for (`--operators ""`: every operator, no overrides).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import pyarrow.compute as pc
import pyarrow.parquet as pq

from testbed.eventlog import EventLogError, find_runs, read_manifest


@dataclass(frozen=True)
class Emissions:
    operator: str
    processed: int
    emitted: int

    @property
    def items_per_output(self) -> Optional[float]:
        """Processed inputs per emitted output; None when nothing was emitted."""
        return self.processed / self.emitted if self.emitted else None


def _sums(path: Path, key: str) -> Dict[str, int]:
    table = pq.read_table(path)
    if table.num_rows == 0:
        return {}
    grouped = table.group_by(key).aggregate([("items", "sum")])
    return dict(zip(grouped[key].to_pylist(), (int(v) for v in grouped["items_sum"].to_pylist()), strict=True))


def run_emissions(run_dir: Path) -> Dict[str, Emissions]:
    """Per operator with a downstream operator: processed and emitted items of one run."""
    processed = _sums(run_dir / "processed.parquet", "operator")
    edges = pq.read_table(run_dir / "edges.parquet")
    emitted: Dict[str, int] = {}
    first_target: Dict[str, str] = {}
    for source, target in zip(edges["source"].to_pylist(), edges["target"].to_pylist(), strict=True):
        first_target.setdefault(source, target)
    for source, target in first_target.items():
        if source not in processed:  # a source of the topology, not an operator
            continue
        mask = pc.and_(pc.equal(edges["source"], source), pc.equal(edges["target"], target))
        emitted[source] = int(pc.sum(edges.filter(mask)["items"]).as_py() or 0)
    return {o: Emissions(o, processed[o], emitted[o]) for o in sorted(emitted)}


def measure(folders: Sequence[Path]) -> Dict[str, Emissions]:
    """Processed and emitted items per operator, summed over the complete runs below `folders`."""
    total: Dict[str, Emissions] = {}
    runs = 0
    for folder in folders:
        for run in find_runs(folder):
            try:
                if read_manifest(run).status != "complete":
                    continue
            except EventLogError:
                continue
            runs += 1
            for o, e in run_emissions(run).items():
                prev = total.get(o, Emissions(o, 0, 0))
                total[o] = Emissions(o, prev.processed + e.processed, prev.emitted + e.emitted)
    if not runs:
        raise EventLogError(f"no complete run below {', '.join(str(f) for f in folders)}")
    return total


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reporting.incidents", description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--operators", default="O2,O6", help="comma-separated; empty: every operator")
    args = parser.parse_args(argv)
    wanted = [o for o in args.operators.split(",") if o]
    try:
        measured = measure(args.folders)
    except (EventLogError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    overrides = []
    for o, e in measured.items():
        if wanted and o not in wanted:
            continue
        ratio = e.items_per_output
        print(f"{o}: processed {e.processed}, emitted {e.emitted}, inputs per output "
              f"{'-' if ratio is None else f'{ratio:.1f}'}")
        if ratio is not None and wanted:
            rounded = float(f"{ratio:.3g}")  # three significant digits, written out
            overrides.append(f"topology.operators.{o}.emission.items_per_incident={rounded:g}")
    if overrides:
        print(" ".join(overrides))
    return 0


if __name__ == "__main__":
    sys.exit(main())
