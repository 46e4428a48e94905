"""A hand-built event log whose metrics are worked out by hand (for the reporting tests)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

from testbed.eventlog import EventLog, Manifest, run_dir_for, write_manifest

# A and B count for the headline compliance, X (like O2/O6) only for the "_all" variant.
# Counts are powers of two so every share is an exact binary fraction and the asserts can be exact.
SLO = {"A": 100.0, "B": 200.0, "X": 100.0}
SAMPLES: List[Tuple[float, str, float]] = [
    # A: 600 at t=0 violates before any compliant sample (no episode); 50 ok; 150 starts an
    # episode that is still open at the end (not counted). RT ok 1, NRT (<=200) 2, relaxed (<=500) 3.
    (0.0, "A", 600.0), (5.0, "A", 50.0), (7.0, "A", 150.0), (11.0, "A", 400.0),
    # B: ok, violation, ok at t=4 -> episode of 2 s; 300 open at the end. RT 2 (200 = bound), NRT 3, relaxed 3.
    (0.0, "B", 100.0), (2.0, "B", 1500.0), (4.0, "B", 200.0), (6.0, "B", 300.0),
    # X: episodes 1..4 (3 s) and 5..6 (1 s); 8 open. 4 of 8 comply at every level.
    (0.0, "X", 50.0), (1.0, "X", 1000.0), (2.0, "X", 1000.0), (4.0, "X", 50.0),
    (5.0, "X", 1000.0), (6.0, "X", 50.0), (7.0, "X", 50.0), (8.0, "X", 1000.0),
]
# headline 8 samples: RT 3/8, NRT 5/8, relaxed 6/8; all 16: 7/16, 9/16, 10/16
# time to adapt: episodes 2 s (B), 3 s and 1 s (X) -> mean 2 s

# Operator A is the only one with a service model: 100 items/s per instance (10 ms, 1 in parallel).
# Monitoring every 10 s: (t, processed, queue depth, running instances); arrivals = processed +
# queue growth -> demand 1, 2, 2, 1, 3, 1 instances against a supply of 1, 1, 2, 2, 3, 3.
MONITORING = [(10.0, 1000, 0, 1), (20.0, 1500, 500, 1), (30.0, 2500, 0, 2), (40.0, 1000, 0, 2),
              (50.0, 3000, 0, 3), (60.0, 1000, 0, 3)]  # 10,000 items processed in all

Lease = Tuple[str, float, float, float, int, int, bool]  # host, start, end, btu_s, paid, prolongations, released
# Baseline leases made under a 60-min BTU: 25 min (3/1/1 BTUs under 10/30/60), exactly 60 min (6/2/1)
BASELINE_LEASES: List[Lease] = [("h1", 0.0, 1500.0, 3600.0, 1, 0, True), ("h2", 600.0, 4200.0, 3600.0, 1, 0, True)]


def _resolved(slo: Dict[str, float], service_mean_ms: float, penalty: float = 0.0001) -> Dict[str, Any]:
    ops: Dict[str, Any] = {op: {"slo_ms": value} for op, value in slo.items()}
    ops["A"]["service"] = {"mean_ms": service_mean_ms, "parallel": 1}
    return {
        "topology": {"operators": ops, "compliance_excluded": ["X"]},
        "billing": {"btu_minutes": 60, "price_per_10_minutes": 1.0, "penalty_per_item": penalty,
                    "rebill_minutes": [10, 30, 60]},
        "policy": {"release_window_fraction": 0.05, "release_window_min_s": 0.0},
        "runtime": {"reasoning_s": 60.0},
    }


def make_run(root: Path, *, config: str = "threshold", rep: int = 1, policy: str = "threshold", btu_minutes: int = 60,
             samples: Sequence[Tuple[float, str, float]] = SAMPLES, leases: Sequence[Lease] = BASELINE_LEASES,
             actions: Sequence[str] = ("lease", "lease", "scale_up", "scale_up", "scale_up", "scale_down",
                                       "migrate", "release", "release"),
             status: str = "complete", pattern: str = "stepwise", billing: str = "",
             slo: Dict[str, float] = SLO, service_mean_ms: float = 10.0) -> Path:
    run_dir = run_dir_for(root, pattern, config, rep)
    log = EventLog(run_dir)
    shuffled = list(samples[1::2]) + list(samples[::2])  # file order must not matter, only time
    log.write("samples", {"t_s": [s[0] for s in shuffled], "operator": [s[1] for s in shuffled],
                          "instance": [f"{s[1]}-1" for s in shuffled], "duration_ms": [s[2] for s in shuffled]})
    ts = [m[0] for m in MONITORING]
    log.write("processed", {"t_s": ts, "operator": ["A"] * len(ts), "items": [m[1] for m in MONITORING]})
    log.write("queues", {"t_s": ts, "operator": ["A"] * len(ts), "depth": [m[2] for m in MONITORING]})
    log.write("instances", {"t_s": ts, "operator": ["A"] * len(ts), "instances": [m[3] for m in MONITORING],
                            "starting": [0] * len(ts), "hosts": [1] * len(ts)})
    log.write("hosts", {"t_s": ts, "leased": [1, 1, 2, 2, 2, 2], "ready": [1, 1, 1, 2, 2, 2]})
    log.write("load", {"t_s": [0.0, 30.0], "machines": [2, 4], "source": ["S1", "S1"], "items": [10, 20],
                       "lateness_ms": [0.0, 0.0]})
    n = len(actions)
    log.write("actions", {"t_s": [float(i) for i in range(n)], "action": list(actions), "operator": [None] * n,
                          "instance": [None] * n, "host": [None] * n, "target_host": [None] * n,
                          "reason": ["test"] * n, "policy": [policy] * n})
    names = ["host", "start_s", "end_s", "btu_s", "paid_btus", "prolongations", "released"]
    log.write("leases", {name: [lease[i] for lease in leases] for i, name in enumerate(names)})
    write_manifest(run_dir, Manifest(
        run_id=f"{pattern}/{config}/{rep}", experiment="test", pattern=pattern, config=config, policy=policy,
        btu_minutes=btu_minutes, rep=rep, seed=100 + rep, seeds={"run": 100 + rep}, backend="sim",
        resolved_config=_resolved(slo, service_mean_ms), code_revision="test-revision", versions={}, status=status,
        billing=billing,
    ))
    return run_dir
