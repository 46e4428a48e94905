"""Measures of the ODP experiments' runs (docs/papers/odp.md#the-71-experiment), per run folder from
its event log and resolved config: the report's per-run metrics, and `testbed odp runs` (the measured
table beside the paper's numbers, and the report's claims).

* `R_ms`: mean end-to-end latency of the sampled items reaching the consumer, after `warmup_s`;
* `k`: instances on hosts below full availability in the final placement (the `placements` table);
  `A_model`: the availability ODP's model gives that placement, prod A_u over the instances and the
  provider's host (links are fully available here);
* `loss_pct`: items lost to unavailability (`dropped`, reason `unavailable`) per item emitted;
  `delivered_pct` = 100 - loss_pct, the availability a tuple sees;
* `T_items_s`, `N_items_ms_s`: items per second crossing hosts, and the same weighted by the delay
  drawn (network usage), from the `host_traffic` table after `after_s`;
* `reassignments`: migrations; `last_reassignment_s`; `solves`, `solve_ms_max`, `solve_status`.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Dict, List, Optional, Union

import pandas as pd

from reporting.evaluations.odp.claims import check_claims
from testbed.eventlog import EventLog, find_runs, read_manifest

TABLES = ("placements", "latency", "dropped", "load", "host_traffic")  # what run_metrics reads

# §7.1 and §7.2 as published (spec odp.md §9.1-9.2): what the measured table is set beside
PAPER_71: Dict[str, Dict[str, Optional[float]]] = {
    "odp-a": {"R_ratio_to_odp_r": 1.8, "A_model": 1.0, "k": 0, "loss_pct": None},
    "odp-r": {"R_ratio_to_odp_r": 1.0, "A_model": 0.99 ** 8, "k": 8, "loss_pct": 3.37},
}


def final_hosts(placements: pd.DataFrame) -> Dict[str, str]:
    """Instance -> host after every placement decision (a migration moves the instance it names)."""
    where: Dict[str, str] = {}
    for instance, host in zip(placements["instance"], placements["host"], strict=True):
        where[instance] = host
    return where


def run_metrics(run_dir: Path, warmup_s: float = 60.0, after_s: float = 200.0) -> Dict[str, Union[str, float]]:
    manifest = read_manifest(run_dir)
    cfg = manifest.resolved_config
    emulation = cfg["backend"]["emulation"]
    availability = {h: float(a) for h, a in (emulation.get("availability") or {}).items()}
    log = EventLog(run_dir)
    placements = log.read("placements")
    hosts = final_hosts(placements)
    k = sum(1 for h in hosts.values() if availability.get(h, 1.0) < 1.0)
    a_model = (math.prod(availability.get(h, 1.0) for h in hosts.values())
               * availability.get(emulation["provider_host"], 1.0))
    latency = log.read("latency")
    latency = latency[latency.t_s >= warmup_s]
    dropped = log.read("dropped")
    lost = int(dropped.loc[dropped.reason == "unavailable", "items"].sum())
    emitted = int(log.read("load")["items"].sum())
    traffic = log.read("host_traffic")
    duration = manifest.sim_duration_s or cfg["duration_min"] * 60.0
    late = traffic[traffic.t_s > after_s]
    span = max(duration - after_s, 1e-9)
    solves = placements.dropna(subset=["solve"]).drop_duplicates("solve")
    migrations = placements[placements.action == "migrate"]
    return {
        "run": str(run_dir), "config": manifest.config, "rep": manifest.rep,
        "R_ms": float(latency.latency_ms.mean()) if len(latency) else math.nan,
        "R_p95_ms": float(latency.latency_ms.quantile(0.95)) if len(latency) else math.nan,
        "k": k, "instances": len(hosts), "A_model": a_model,
        "loss_pct": 100.0 * lost / emitted if emitted else math.nan,
        "delivered_pct": 100.0 * (1 - lost / emitted) if emitted else math.nan,
        "T_items_s": float(late["items"].sum()) / span,
        "N_items_ms_s": float((late["items"] * late["delay_ms"]).sum()) / span,
        "reassignments": int(len(migrations)),
        "last_reassignment_s": float(migrations.t_s.max()) if len(migrations) else math.nan,
        "solves": int(len(solves)),
        "solve_ms_max": float(solves.solve_s.max() * 1000.0) if len(solves) else math.nan,
        "solve_cpu_ms_max": float(solves.solve_cpu_s.max() * 1000.0) if len(solves) else math.nan,
        "solve_status": ",".join(sorted(set(solves.solver_status))) if len(solves) else "",
    }


def runs_table(root: Path, warmup_s: float = 60.0, after_s: float = 200.0) -> pd.DataFrame:
    rows = [run_metrics(r, warmup_s, after_s) for r in find_runs(root)]
    return pd.DataFrame(rows)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Mean over repetitions per configuration."""
    numeric = table.drop(columns=["run", "rep", "solve_status"])
    out = numeric.groupby("config").mean()
    out["reps"] = table.groupby("config").size()
    out["solve_status"] = table.groupby("config")["solve_status"].agg(
        lambda s: ",".join(sorted(set(",".join(s).split(",")))))
    return out


def paper_71_table(measured: pd.DataFrame) -> pd.DataFrame:
    """§7.1: measured means beside the paper's numbers (odp-r and odp-a)."""
    if "odp-r" not in measured.index or "odp-a" not in measured.index:
        return pd.DataFrame()
    r_ref = measured.loc["odp-r", "R_ms"]
    rows = []
    for config in ("odp-r", "odp-a"):
        m, p = measured.loc[config], PAPER_71[config]
        rows.append({
            "config": config, "R_ms": m["R_ms"], "R_ratio_to_odp_r": m["R_ms"] / r_ref,
            "paper_R_ratio": p["R_ratio_to_odp_r"], "k": m["k"], "paper_k": p["k"],
            "A_model": m["A_model"], "paper_A": p["A_model"], "delivered_pct": m["delivered_pct"],
            "loss_pct": m["loss_pct"], "paper_loss_pct": p["loss_pct"], "solve_ms_max": m["solve_ms_max"],
            "solve_cpu_ms_max": m["solve_cpu_ms_max"],
        })
    return pd.DataFrame(rows).set_index("config")


def claims(measured: pd.DataFrame, pattern: str = "tag_and_count") -> pd.DataFrame:
    """The report's claims (claims.py) on these measured means."""
    long = measured.drop(columns=["reps", "solve_status", "instances"], errors="ignore").reset_index()
    long = long.melt(id_vars="config", var_name="metric", value_name="mean").assign(pattern=pattern)
    return check_claims(long, pd.DataFrame())


def main(argv: List[str]) -> int:
    if not argv:
        print("usage: testbed odp runs RUNS_DIR [warmup_s=60] [after_s=200]", file=sys.stderr)
        return 2
    opts = dict(a.split("=", 1) for a in argv[1:])
    table = runs_table(Path(argv[0]), float(opts.get("warmup_s", 60)), float(opts.get("after_s", 200)))
    if table.empty:
        print(f"error: no runs below {argv[0]}", file=sys.stderr)
        return 2
    measured = summary(table)
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(measured.to_string(float_format=lambda v: f"{v:.4g}"))
        t = paper_71_table(measured)
        if not t.empty:
            print("\n§7.1 beside the paper\n" + t.to_string(float_format=lambda v: f"{v:.4g}"))
        for c in claims(measured).itertuples():
            print(f"{c.measured:>14}  {c.claim}: {c.text}: {c.measured_detail}")
    return 0
