"""Claims D1-D10 of the Daedalus paper (docs/papers/daedalus.md#claims) on the long results of
reporting.evaluations.daedalus.measures (pattern, config, metric, against, mean). They stay code,
each one small function, because the claim engine (reporting/claims.py) compares values of one
pattern's table, one comparison per claim:
* D1-D3 join a workers comparison against every HPA (the paper's chart, `-r50`, where it was
  measured, else the plain one) and static with a latency condition of the paper's own wording
  (between the two HPAs, the highest of four within 1.5 s, every autoscaler below static);
* D4 joins five comparisons on ks_sine (fewer and more workers, keeping up, the lowest latency);
* D5 is not measured at all (Phoebe is out of scope);
* D6-D8 hold over every workload measured, on Daedalus' own thresholds (5 %, 50 %, 90 %), with one row
  for all of them;
* D9 and D10 join conditions across workloads and engines (every Flink workload, Kafka Streams).
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

import pandas as pd

from reporting.evaluations.daedalus.measures import value

FLINK = ("wc_sine", "ysb_avazu", "tm_two_spike")
Row = Dict[str, str]


def _hpas(res: pd.DataFrame, pattern: str, targets: Sequence[int]) -> List[str]:
    """The HPA configurations a claim is checked against: the paper's chart (request = half a worker,
    `-r50`) when measured, else the plain ones."""
    have = set(res[res.pattern == pattern].config)
    return [f"hpa-{t}-r50" if f"hpa-{t}-r50" in have else f"hpa-{t}" for t in targets]


def fmt(x: Optional[float], d: int = 1) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:,.{d}f}"


def _row(claim: str, text: str, verdict: Optional[bool], evidence: str) -> Row:
    return {"claim": claim, "statement": text,
            "verdict": "not measured" if verdict is None else ("holds" if verdict else "does not hold"),
            "evidence": evidence}


def _workers_claim(res: pd.DataFrame, pattern: str,
                   hpa_targets: Sequence[int]) -> Tuple[bool, List[str], Dict[str, float]]:
    w = {c: value(res, pattern, c, "mean_workers") for c in set(res[res.pattern == pattern].config)}
    lat = {c: value(res, pattern, c, "latency_ms") for c in w}
    up = {c: value(res, pattern, c, "keeps_up") for c in w}
    ok, ev = True, []
    for o in _hpas(res, pattern, hpa_targets) + ["static-12"]:
        if o not in w or "daedalus" not in w:
            ok = False
            ev.append(f"{o}: not measured")
            continue
        saved = (w[o] - w["daedalus"]) / w[o] * 100
        ev.append(f"{o}: {fmt(w[o])} workers, latency {fmt(lat[o], 0)} ms, keeps up "
                  f"{int(up[o]) if not math.isnan(up[o]) else 'n/a'}; "
                  f"Daedalus saves {fmt(saved)} %")
        ok &= saved > 0
    return ok, ev, lat


_FLINK_CLAIMS = (
    ("D1", "wc_sine", "Flink WC: Daedalus uses fewer workers than HPA 85, HPA 80 (23/31 %) and static (55 %); its "
                      "latency lies between HPA 85's and HPA 80's and below static's"),
    ("D2", "ysb_avazu", "Flink YSB: 43-54 % fewer workers; Daedalus' mean latency is the highest of the four, all "
                        "within about 1.5 s"),
    ("D3", "tm_two_spike", "Flink TM: 38-71 % fewer workers; every autoscaler beats static on mean latency"),
)


def _latency_part(claim: str, lat: Dict[str, float], h85: str, h80: str) -> Tuple[bool, str]:
    """The latency half of D1-D3: (holds, evidence)."""
    d, static = lat.get("daedalus", math.nan), lat.get("static-12", math.nan)
    if claim == "D1":
        low, high = lat.get(h85, math.nan), lat.get(h80, math.nan)
        between = min(low, high) <= d <= max(low, high)
        below = d < static
        return between and below, f"; Daedalus latency {fmt(d, 0)} ms: between the HPAs {between}, below static {below}"
    if claim == "D2":
        vals = [lat.get(c, math.nan) for c in ("daedalus", h80, h85, "static-12")]
        highest, spread = d >= max(vals), max(vals) - min(vals)
        return highest and spread <= 1500, (f"; Daedalus latency {fmt(d, 0)} ms highest {highest}; "
                                            f"spread {fmt(spread, 0)} ms")
    beats = all(lat.get(c, math.nan) < static for c in ("daedalus", h80, h85))
    return beats, f"; every autoscaler below static's {fmt(static, 0)} ms: {beats}"


def flink_workloads(res: pd.DataFrame) -> List[Row]:
    """D1-D3: fewer workers than every HPA and static on each Flink workload, and its latency claim."""
    rows, patterns = [], set(res.pattern)
    for claim, pattern, text in _FLINK_CLAIMS:
        if pattern not in patterns:
            rows.append(_row(claim, text, None, f"no runs of {pattern}"))
            continue
        ok, ev, lat = _workers_claim(res, pattern, (85, 80))
        h85, h80 = _hpas(res, pattern, (85, 80))
        latency_ok, extra = _latency_part(claim, lat, h85, h80)
        rows.append(_row(claim, text, ok and latency_ok, "; ".join(ev) + extra))
    return rows


def kafka_streams(res: pd.DataFrame) -> Row:
    text = ("Kafka Streams WC: 57 % fewer workers than static, 11 % fewer than HPA 60; HPA 80 uses fewer workers but "
            "cannot keep up; static has the best latency")
    if "ks_sine" not in set(res.pattern):
        return _row("D4", text, None, "no runs of ks_sine (evaluation daedalus_ks)")
    w = {c: value(res, "ks_sine", c, "mean_workers") for c in ("daedalus", "hpa-60", "hpa-80", "static-12")}
    lat = {c: value(res, "ks_sine", c, "latency_ms") for c in w}
    up80 = value(res, "ks_sine", "hpa-80", "keeps_up")
    ok = (w["daedalus"] < w["static-12"] and w["daedalus"] < w["hpa-60"] and w["hpa-80"] < w["daedalus"]
          and up80 < 1 and lat["static-12"] <= min(lat.values()))
    return _row("D4", text, ok,
                "; ".join(f"{c}: {fmt(w[c])} workers, {fmt(lat[c], 0)} ms" for c in w) + f"; HPA 80 keeps up: {up80}")


def _own(res: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Daedalus' rows of one metric that have a value, one per workload."""
    rows = res[(res.config == "daedalus") & (res.metric == metric)]
    return rows[rows["mean"].notna()]


def capacity(res: pd.DataFrame) -> Row:
    """D6 on the workloads whose capacity error was measured, each named beside its own value."""
    cap = _own(res, "capacity_error_pct")
    return _row("D6", "Capacity estimates within 5 % of the observed maxima, mostly 0-3 %",
                bool(len(cap)) and bool((cap["mean"] <= 5).all()),
                "median error of C(p_cur) against the true μ / max s_w per workload: " + ", ".join(
                    f"{p} {fmt(v)} %" for p, v in zip(cap.pattern, cap["mean"], strict=True)))


def forecasts(res: pd.DataFrame) -> Row:
    dd = res[res.config == "daedalus"]
    wape = dd[dd.metric == "forecast_wape_below_5_pct"]
    fb = dd[dd.metric == "fallback_loops"]
    return _row("D7", "Forecast errors mostly below 5 %; WAPE never reaches 25 %, so the fallback is unused",
                bool(len(wape)) and bool((wape["mean"] > 50).all()) and bool((fb["mean"] <= 1).all()),
                "loops with WAPE < 5 %: "
                + ", ".join(f"{p} {fmt(v)} %" for p, v in zip(wape.pattern, wape["mean"], strict=True))
                + "; fallback loops per run (the first loop has no previous forecast and always falls back): "
                + ", ".join(f"{p} {fmt(v)}" for p, v in zip(fb.pattern, fb["mean"], strict=True)))


def recovery(res: pd.DataFrame) -> Row:
    dd = res[res.config == "daedalus"]
    ge = dd[dd.metric == "rt_predicted_ge_observed_pct"]

    def own(p: str, metric: str, d: int = 1) -> str:
        return fmt(value(res, p, "daedalus", metric), d)

    return _row("D8", "Predicted RT >= measured RT almost always", bool(len(ge)) and bool((ge["mean"] >= 90).all()),
                "rescales with predicted >= anomaly-observed RT: "
                + ", ".join(f"{p} {fmt(v)} %" for p, v in zip(ge.pattern, ge["mean"], strict=True))
                + "; with predicted >= true RT (until the lag is back): "
                + ", ".join(f"{p} {own(p, 'rt_predicted_ge_true_pct')} %" for p in ge.pattern)
                + "; mean predicted / observed / true (lag back) RT: "
                + ", ".join(f"{p} {own(p, 'rt_predicted_s', 0)} / {own(p, 'rt_observed_s', 0)}"
                            f" / {own(p, 'rt_true_s', 0)} s" for p in ge.pattern))


def scale_in(res: pd.DataFrame) -> Row:
    patterns = set(res.pattern) & set(FLINK)
    ev, ok = [], bool(patterns)
    for p in sorted(patterns):
        for h in _hpas(res, p, (80, 85)):
            fd, fh = value(res, p, "daedalus", "excess_workers_falling"), value(res, p, h, "excess_workers_falling")
            rd, rh = value(res, p, "daedalus", "excess_workers_rising"), value(res, p, h, "excess_workers_rising")
            ok &= fd < fh
            ev.append(f"{p} vs {h}: excess workers falling {fmt(fd, 2)} vs {fmt(fh, 2)}, rising {fmt(rd, 2)} vs "
                      f"{fmt(rh, 2)}")
    return _row("D9", "Daedalus scales in faster than HPA on falling workloads and out at about the same time",
                ok if ev else None, "; ".join(ev))


def fixed_threshold(res: pd.DataFrame) -> Row:
    flink = [p for p in FLINK if p in set(res.pattern)]
    if not (flink and "ks_sine" in set(res.pattern)):
        return _row("D10", "A fixed HPA threshold does not generalise", None,
                    "needs the Flink workloads and ks_sine (evaluation daedalus_ks)")
    over = all(value(res, p, _hpas(res, p, (80,))[0], "mean_workers") > value(res, p, "daedalus", "mean_workers")
               for p in flink)
    under = value(res, "ks_sine", "hpa-80", "keeps_up") < 1
    return _row("D10", "A fixed HPA threshold does not generalise: "
                "HPA 80 over-provisions on Flink and under-provisions on Kafka Streams", over and under,
                f"HPA 80 above Daedalus' workers on every Flink workload: {over}; "
                f"HPA 80 fails to keep up on Kafka Streams: {under}")


def check_claims(res: pd.DataFrame) -> pd.DataFrame:
    """D1-D10: claim, statement, verdict (holds / does not hold / not measured), evidence."""
    phoebe = _row("D5", "Against Phoebe: 19 % fewer workers at about 2.9x the mean latency", None,
                  "Phoebe is out of scope (docs/papers/daedalus.md#simulator)")
    return pd.DataFrame([*flink_workloads(res), kafka_streams(res), phoebe, capacity(res), forecasts(res),
                         recovery(res), scale_in(res), fixed_threshold(res)])
