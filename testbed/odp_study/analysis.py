"""Analysis of the study's results: time per sweep, sampling degradation (spec §12's three
measures), the gap trace, and the paper's claims O8-O12 as holds / does not hold.

Every claim is judged three times: on wall-clock resolution time (the paper's measure, which on a
shared machine also measures the neighbours), on the solver's CPU time (what wall time is on a
dedicated machine with one thread), and on simplex iterations (deterministic with one thread and a
fixed seed). Time-limited runs enter with their limit, a lower bound on the true time.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional

import numpy as np
import pandas as pd

from testbed.odp_study.grid import Grid

HOLDS, FAILS, UNMEASURED = "holds", "does not hold", "not measured"
MEASURES = {"wall": "time_s", "cpu": "cpu_s", "work": "lp_iterations"}


@dataclass(frozen=True)
class Claim:
    id: str
    paper: str  # what the paper says
    test: str  # how the measured data decide it
    verdict: Dict[str, str]  # measure ("wall", "cpu", "work") → verdict
    evidence: str


def experiment(df: pd.DataFrame, name: str) -> pd.DataFrame:
    return df[df["experiments"].str.split(";").apply(lambda tags: name in tags)]


def sweep(df: pd.DataFrame, name: str, x: str, column: str = "time_s") -> pd.DataFrame:
    """Median of `column` per topology and x (over seeds), with the count of time-limited runs."""
    rows = experiment(df, name)
    out = rows.groupby(["topo", x]).agg(value=(column, "median"), runs=(column, "size"),
                                        limited=("status", lambda s: int((s == "time_limit").sum())))
    return out.reset_index()


def loglog_slope(x: pd.Series, y: pd.Series) -> float:
    """Least-squares slope of log y over log x: the exponent of a power-law fit."""
    lx, ly = np.log(np.asarray(x, float)), np.log(np.maximum(np.asarray(y, float), 1e-6))
    return float(np.polyfit(lx, ly, 1)[0]) if len(lx) >= 2 else math.nan


def spearman(x: pd.Series, y: pd.Series) -> float:
    rx, ry = pd.Series(list(x)).rank(), pd.Series(list(y)).rank()
    return float(rx.corr(ry)) if len(rx) >= 2 else math.nan


def degradation(df: pd.DataFrame) -> pd.DataFrame:
    """Per topology, seed and sampled fraction, against the same seed's full-candidate solve:
    F_opt/F_s (F with the full instance's bounds), R_s/R_opt, the excess ratio
    (R_s − ΣR)/(R_opt − ΣR) with ΣR the longest path's pure execution time, and the speed-up."""
    rows = experiment(df, "fig10ab")
    out = []
    for (topo, seed), group in rows.groupby(["topo", "seed"]):
        full = group[group["cand_frac"] == 1.0]
        if full.empty:
            continue
        ref = full.iloc[0]
        r_opt, lo, hi = ref["response_time_ms"], ref["r_min_ms"], ref["r_max_ms"]
        f_opt = (hi - r_opt) / (hi - lo)
        for _, s in group.sort_values("cand_frac").iterrows():
            r_s = s["response_time_ms"]
            feasible = not pd.isna(r_s)
            f_s = (hi - r_s) / (hi - lo) if feasible else math.nan
            out.append({
                "topo": topo, "seed": seed, "cand_frac": s["cand_frac"], "status": s["status"],
                "reference_status": ref["status"], "time_s": s["time_s"], "cpu_s": s["cpu_s"],
                "lp_iterations": s["lp_iterations"],
                "speedup": ref["time_s"] / max(s["time_s"], 1e-9),
                "cpu_speedup": ref["cpu_s"] / max(s["cpu_s"], 1e-9),
                "work_speedup": ref["lp_iterations"] / max(s["lp_iterations"], 1),
                "F_opt/F_s": f_opt / f_s if feasible and f_s > 0 else math.nan,
                "R_s/R_opt": r_s / r_opt if feasible else math.nan,
                "excess": (r_s - lo) / (r_opt - lo) if feasible and r_opt > lo else math.nan,
            })
    return pd.DataFrame(out)


def time_to_gap(trace: pd.DataFrame, topo: str, threshold: float = 0.10) -> float:
    rows = trace[(trace["topo"] == topo) & (trace["gap"] < threshold)]
    return float(rows["t_s"].min()) if not rows.empty else math.inf


def when(t_s: float) -> str:
    return "never" if math.isinf(t_s) else f"after {t_s:.2f} s"


def _verdict(ok: Optional[bool]) -> str:
    return UNMEASURED if ok is None else (HOLDS if ok else FAILS)


def _fmt(v: float, digits: int = 2) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if isinstance(v, float) and math.isinf(v):
        return "never"
    return f"{v:.{digits}f}"


def _growth(df: pd.DataFrame, topos: List[str]) -> Claim:
    """O8a: growth with operators vs with nodes (exponents of power-law fits over each sweep)."""
    verdict, evidence = {}, []
    for measure, column in MEASURES.items():
        ok = True
        for topo in topos:
            a = sweep(df, "fig9a", "n_ops", column).query("topo == @topo")
            b = sweep(df, "fig9b", "n_nodes", column).query("topo == @topo")
            sa, sb = loglog_slope(a["n_ops"], a["value"]), loglog_slope(b["n_nodes"], b["value"])
            ok &= sa > sb
            evidence.append(f"{measure} {topo}: exponent {_fmt(sa)} in operators vs {_fmt(sb)} in nodes")
        verdict[measure] = _verdict(ok)
    return Claim("O8a", "resolution time grows much faster with |V_dsp| than with |V_res|",
                 "power-law exponent of the operator sweep (9a) > that of the node sweep (9b), both topologies",
                 verdict, "; ".join(evidence))


def _scenarios(df: pd.DataFrame, topos: List[str], grid: Grid) -> Claim:
    """O8b: Sc2 (fewer operators, more nodes, same |x|) solves faster than Sc1."""
    verdict, evidence = {}, []
    sc1, sc2 = experiment(df, "sc1"), experiment(df, "sc2")
    for measure, column in MEASURES.items():
        ok = True
        for topo in topos:
            t1 = sc1[sc1["topo"] == topo][column].median()
            t2 = sc2[sc2["topo"] == topo][column].median()
            ok &= t1 > t2
            evidence.append(f"{measure} {topo}: Sc1/Sc2 = {_fmt(t1 / t2)}")
        verdict[measure] = _verdict(ok)
    return Claim("O8b", "Sc2 is solved 2× (seq) and 36× (fat) faster than Sc1 (equal |x|)",
                 f"Sc1 {grid.sc1} slower than Sc2 {grid.sc2} (operators, nodes), both topologies",
                 verdict, "; ".join(evidence))


def _capacity(df: pd.DataFrame, topos: List[str]) -> Claim:
    """O9a: time falls as C_u rises."""
    verdict, evidence = {}, []
    for measure, column in MEASURES.items():
        ok = True
        for topo in topos:
            c = sweep(df, "fig9c", "C_u", column).query("topo == @topo").sort_values("C_u")
            rho = spearman(c["C_u"], c["value"])
            first, last = c["value"].iloc[0], c["value"].iloc[-1]
            ok &= rho < 0 and last < first
            evidence.append(f"{measure} {topo}: rank correlation {_fmt(rho)}, C_u={c['C_u'].iloc[0]:g}→"
                            f"{c['C_u'].iloc[-1]:g} ×{_fmt(last / first, 3)}")
        verdict[measure] = _verdict(ok)
    return Claim("O9a", "resolution time decreases as C_u rises from 2 to 10",
                 "negative rank correlation of C_u and time, and the largest C_u faster than the smallest, "
                 "both topologies", verdict, "; ".join(evidence))


def _sampling_time(df: pd.DataFrame, deg: pd.DataFrame, topos: List[str]) -> Claim:
    """O10a: sampling cuts time."""
    verdict, evidence = {}, []
    for measure, column in MEASURES.items():
        ok = not deg.empty
        for topo in topos:
            rows = experiment(df, "fig10ab").query("topo == @topo")
            med = rows.groupby("cand_frac")[column].median().sort_index()
            if med.empty:
                continue
            rho = spearman(med.index.to_series(), med)
            ok &= med.iloc[0] < med.iloc[-1] and rho > 0
            evidence.append(f"{measure} {topo}: ×{_fmt(med.iloc[-1] / max(med.iloc[0], 1e-9), 1)} faster at "
                            f"{med.index[0]:.0%} than at 100 %, rank correlation {_fmt(rho)}")
        verdict[measure] = _verdict(ok)
    return Claim("O10a", "sampling candidates below 40 % cuts resolution time by up to ~10^5×",
                 "median time rises with the candidate fraction (positive rank correlation) and the "
                 "smallest fraction is faster than 100 %, both topologies (the factor is reported)",
                 verdict, "; ".join(evidence))


def _sampling_quality(deg: pd.DataFrame) -> Claim:
    """O10b: degradation at the smallest sampled fraction, fat small, sequential larger."""
    evidence = []
    holds: Optional[bool] = None
    if not deg.empty:
        low = deg["cand_frac"][deg["cand_frac"] < 1.0].min()
        at = deg[deg["cand_frac"] == low].groupby("topo")[["F_opt/F_s", "R_s/R_opt", "excess"]].median()
        for topo in at.index:
            evidence.append(f"{topo} at {low:.0%}: " + ", ".join(f"{k} {_fmt(v, 3)}" for k, v in at.loc[topo].items()))
        if {"fat", "seq"} <= set(at.index):
            holds = bool(at.loc["fat", "excess"] < at.loc["seq", "excess"] and at.loc["fat", "R_s/R_opt"] <= 1.05)
    return Claim("O10b", "at 20 % candidates fat degrades by 1.02 and sequential by about 3",
                 "at the smallest sampled fraction, median excess ratio of fat < sequential's and fat's "
                 "R_s/R_opt ≤ 1.05 (only an excess or normalised measure can reach ≈ 3, spec §12)",
                 {m: _verdict(holds) for m in MEASURES}, "; ".join(evidence) or "no data")


def _gap(trace: pd.DataFrame, topos: List[str], grid: Grid) -> Claim:
    """O11: the gap under a time limit."""
    evidence = []
    holds: Optional[bool] = None
    if not trace.empty:
        t10 = {topo: time_to_gap(trace, topo) for topo in topos}
        final = {topo: trace[trace["topo"] == topo]["gap"].iloc[-1] for topo in topos}
        evidence = [f"{topo}: gap < 10 % {when(t10[topo])}, final gap {_fmt(final[topo], 3)}" for topo in topos]
        holds = t10.get("seq", math.inf) < t10.get("fat", math.inf)
    return Claim("O11", "under a time limit sequential reaches a gap < 10 % early (500 s), fat only near the end",
                 f"on {grid.trace_size[0]} operators × {grid.trace_size[1]} nodes with a "
                 f"{grid.trace_limit_s:g} s limit, sequential reaches a gap < 10 % before fat",
                 {"wall": _verdict(holds), "cpu": UNMEASURED, "work": UNMEASURED},
                 "; ".join(evidence) or "no trace")


def _shape(df: pd.DataFrame) -> Claim:
    """O12: fat harder than sequential at equal size."""
    verdict, evidence = {}, []
    solved = df[~df["experiments"].str.contains("fig10c")]
    keys = ["n_ops", "n_nodes", "C_u", "cand_frac", "seed"]
    pairs = solved.pivot_table(index=keys, columns="topo", values=list(MEASURES.values()), aggfunc="median")
    for measure, column in MEASURES.items():
        if ("fat" not in pairs[column]) or ("seq" not in pairs[column]):
            verdict[measure] = UNMEASURED
            continue
        ratio = (pairs[column]["fat"] / pairs[column]["seq"].clip(lower=1e-9)).dropna()
        share = float((ratio > 1).mean())
        verdict[measure] = _verdict(share >= 0.8)
        evidence.append(f"{measure}: fat slower in {share:.0%} of {len(ratio)} pairs, median "
                        f"×{_fmt(ratio.median(), 1)}")
    return Claim("O12", "at equal size the fat topology is much harder than the sequential one",
                 "fat slower than sequential in ≥ 80 % of the instances solved in both shapes",
                 verdict, "; ".join(evidence))


def claims(df: pd.DataFrame, trace: pd.DataFrame, grid: Grid) -> List[Claim]:
    """O8-O12, each judged on wall time, CPU time and simplex iterations."""
    topos = sorted(df["topo"].unique())
    deg = degradation(df)
    unrun = Claim("O9b", "the load (resources the application requires) does not affect resolution time",
                  "the paper does not define the load sweep; not run", {m: UNMEASURED for m in MEASURES}, "not run")
    return [_growth(df, topos), _scenarios(df, topos, grid), _capacity(df, topos), unrun,
            _sampling_time(df, deg, topos), _sampling_quality(deg), _gap(trace, topos, grid), _shape(df)]
