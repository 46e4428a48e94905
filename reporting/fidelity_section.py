"""The report's "Fidelity" section: how far a profile calibrated on one workload lands from the
published cells of the held-out ones, which claims hold, and the sweeps that explain the misses.
The cells and their kinds are the evaluation's (`evaluation.fidelity.cells`, recorded by
`testbed fidelity`); a folder written before kinds existed has the BTU paper's.

Present when the runs folder has a `fidelity/` folder written by `testbed fidelity`."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import List, Mapping, Optional

import pandas as pd

from reporting.claims import HOLDS
from reporting.fidelity_gaps import BTU_CELLS, FIDELITY_FOLDER, cell_gaps, strongest, summarise_effects
from reporting.report_document import Block, Section, Table, number

CALIBRATION_DIR = Path(__file__).resolve().parent.parent / "experiments" / "calibration"


@dataclass
class FidelityInputs:
    config: dict  # testbed fidelity's config (profile, calibrated_on, ...)
    seconds: dict
    sensitivity: Optional[pd.DataFrame]
    behaviours: Optional[pd.DataFrame]
    record: Optional[dict]  # the calibration record of the profile, if there is one
    notes: List[str]  # paragraphs of the profile's hand-written notes


def load_fidelity(runs_dir: Path, calibration_dir: Path = CALIBRATION_DIR) -> Optional[FidelityInputs]:
    folder = Path(runs_dir) / FIDELITY_FOLDER
    if not (folder / "fidelity.json").is_file():
        return None
    meta = json.loads((folder / "fidelity.json").read_text(encoding="utf-8"))

    def table(name: str) -> Optional[pd.DataFrame]:
        path = folder / f"{name}.csv"
        return pd.read_csv(path) if path.is_file() else None

    profile = meta["config"]["profile"]
    record_path = calibration_dir / f"{profile}.record.json"
    notes_path = calibration_dir / f"{profile}.notes.md"
    record = json.loads(record_path.read_text(encoding="utf-8")) if record_path.is_file() else None
    notes = [p.strip() for p in notes_path.read_text(encoding="utf-8").split("\n\n")
             if p.strip()] if notes_path.is_file() else []
    return FidelityInputs(meta["config"], meta.get("seconds", {}), table("sensitivity"), table("behaviours"), record,
                          notes)


def acceptance_gaps(comparison: pd.DataFrame, cells: Mapping[str, str] = BTU_CELLS) -> pd.DataFrame:
    """The published cells the fidelity targets name, with their gaps (reporting.fidelity_gaps)."""
    return cell_gaps(comparison, cells)


KIND_TARGETS = {"points": "±5 pp", "share": "±5 pp", "relative": "±15 %", "ratio": "x1/1.3-x1.3", "absolute": "±1"}


def roles(gaps: pd.DataFrame, calibrated_on: str, configs: List[str]) -> pd.Series:
    """Per cell: calibration (the search saw it) or held out."""
    seen = (gaps["pattern"] == calibrated_on) & (gaps["approach"].isin(configs) if configs else True)
    return pd.Series(["calibration" if s else "held out" for s in seen], index=gaps.index)


def _pattern_table(gaps: pd.DataFrame, claims: pd.DataFrame, calibrated_on: str, configs: List[str]) -> Table:
    kinds = list(dict.fromkeys(gaps["kind"]))
    gaps = gaps.assign(role=roles(gaps, calibrated_on, configs))
    rows = []
    for (pattern, role), own in gaps.groupby(["pattern", "role"], sort=True):
        mine = claims[claims["pattern"] == pattern]
        held = int((mine["measured"] == HOLDS).sum())
        held_paper = int((mine["paper"] == HOLDS).sum())
        per_kind = []
        for kind in kinds:
            k = own[own["kind"] == kind]
            worst = k["gap"].abs().max() if kind != "ratio" else _worst_ratio(k["gap"])
            per_kind += [f"{int(k['within'].sum())}/{len(k)}", number(worst, 2 if kind == "ratio" else 1)]
        rows.append([pattern, role, *per_kind,
                     f"{held}/{len(mine)} (paper {held_paper})"])
    headers = [h for kind in kinds for h in (f"{kind} within ({KIND_TARGETS[kind]})", f"worst {kind} gap")]
    return Table("Per workload: published cells within target by kind (worst gap in the kind's unit: pp, %, or the "
                 "ratio measured/paper furthest from 1), claims holding on the measured numbers",
                 ["workload", "role", *headers, "claims holding"], rows)


def _worst_ratio(ratios: pd.Series) -> float:
    r = ratios.dropna()
    return float(r.iloc[(r.map(lambda x: abs(math.log(x)) if x > 0 else math.inf)).argmax()]) if len(r) else math.nan


def _gap_table(gaps: pd.DataFrame) -> Table:
    rows = [[r.pattern, r.config, r.metric, number(r.mean_paper), number(r.mean_measured),
             f"{number(r.gap, 2 if r.unit == 'x' else 1, signed=r.unit != 'x')} {r.unit}".rstrip(),
             "yes" if r.within else "NO"]
            for r in gaps.itertuples()]
    return Table("Gap per published cell (points: measured − paper in pp; relative: in % of the paper's value; "
                 "ratio: measured / paper)",
                 ["workload", "configuration", "metric", "paper", "measured", "gap", "within target"], rows)


def _explain_misses(gaps: pd.DataFrame, calibrated_on: str, sensitivity: Optional[pd.DataFrame]) -> List[str]:
    misses = gaps[~gaps["within"]]
    if misses.empty:
        return ["Every published cell is within its target."]
    out = []
    for r in misses.itertuples():
        if r.unit == "x":
            text = f"{r.pattern} {r.config} {r.metric}: x{number(r.gap, 2)} the paper's (target x1/1.3 to x1.3)."
        else:
            text = (f"{r.pattern} {r.config} {r.metric}: {number(r.gap, 1, signed=True)} {r.unit} "
                    f"(target ±{r.tolerance:g} {r.unit}, missed by {abs(r.gap) - r.tolerance:.1f} {r.unit}).")
        if sensitivity is not None and not sensitivity.empty:
            moves = strongest(sensitivity[sensitivity["group"] == "parameter"], r.config, r.metric)
            if moves:
                text += (f" On {calibrated_on}, this cell moves most with: "
                         + "; ".join(f"{n} {v} ({_delta(d, r.kind)})" for n, v, d in moves) + ".")
        out.append(text)
    return out


def _delta(delta: float, kind: str) -> str:
    """A change of a cell's value in the unit its gap is read in (a fraction's in points)."""
    if kind == "share":
        return f"{100.0 * delta:+.1f} pp"
    return f"{delta:+.1f}{' pp' if kind == 'points' else ''}"


def _effects_table(table: pd.DataFrame, caption: str, btu: bool) -> Table:
    effects = summarise_effects(table, by_btu=btu)
    value_columns = [c for c in effects.columns if c not in ("group", "name", "variant", "distance")]
    headers = ["name", "variant", *[c.replace("_compliance_pct", " %").replace("_", " ") for c in value_columns],
               "distance"]
    rows = [[str(r["name"]), str(r["variant"]), *[number(r[c], 1, signed=True) for c in value_columns],
             number(r["distance"], 2)] for _, r in effects.iterrows()]
    profile_distance = float(table["profile_distance"].iloc[0]) if not table.empty else float("nan")
    unit = ("compliance in pp, resource cost in price units; btu = mean over BTU 10/30/60" if btu
            else "each metric's mean change over the configurations, in the metric's unit")
    return Table(f"{caption} (change against the profile: {unit}; distance to the workload's published cells, "
                 f"the profile's own is {profile_distance:.2f})", headers, rows)


def preferred_alternatives(table: pd.DataFrame, configs: List[str]) -> List[str]:
    """Per alternative (an unknown only held-out cells judge): the distance of the held-out cells
    under each of its values, the profile's own included, and the value they prefer."""
    if "profile_normalised_gap" not in table:
        return []
    rows = table[(table["group"] == "alternative") & ~table["config"].isin(configs)]
    out = []
    for name, own in rows.groupby("name", sort=False):
        def rms(gaps: pd.Series) -> float:
            return float((gaps.astype(float) ** 2).mean() ** 0.5)

        first = own[own["variant"] == own["variant"].iloc[0]]
        scores = {"the profile's own": rms(first["profile_normalised_gap"])}
        scores.update({str(v): rms(g["normalised_gap"]) for v, g in own.groupby("variant", sort=False)})
        best = min(scores, key=lambda k: scores[k])
        out.append(f"{name}: the held-out cells ({', '.join(sorted(set(own['config'])))}) prefer {best} "
                   f"(distance {scores[best]:.2f}; " + ", ".join(f"{k} {v:.2f}" for k, v in scores.items()) + ").")
    return out


def fidelity_section(inputs: FidelityInputs, comparison: pd.DataFrame, claims: pd.DataFrame) -> Section:
    cfg = inputs.config
    calibrated_on = cfg.get("calibrated_on", "stepwise")
    cells = cfg.get("cells") or BTU_CELLS
    btu = cfg.get("evaluation", "btu") == "btu"
    gaps = acceptance_gaps(comparison, cells)
    targets = ", ".join(f"{m} {KIND_TARGETS[k]}" for m, k in cells.items())
    blocks: List[Block] = [
        f"Profile {cfg['profile']}, calibrated on {calibrated_on} alone, run unchanged on every workload "
        f"({cfg['reps']} repetitions, seed {cfg['seed']}); the other workloads are held out. Targets: every "
        f"published cell within its tolerance ({targets}), and every published claim holding.",
    ]
    if inputs.record:
        rec = inputs.record
        best = rec["best"]
        blocks.append(f"Calibration: {rec['trials']} trials of {rec['search']['library']} "
                      f"({rec['search']['sampler']}, seed {rec['config']['seed']}, {rec['config']['reps']} "
                      "repetition(s) "
                      f"per trial) took {rec['wall_time_s'] / 60:.1f} min; best trial {best['number']} at distance "
                      f"{best['distance']:.3f} with {best['within']}/{best['cells']} {rec['config']['pattern']} cells "
                      "within target. "
                      "Values: " + ", ".join(f"{k} = {v}" for k, v in best["values"].items()) + ".")
    configs = list(cfg.get("calibrate_configs") or [])
    role = roles(gaps, calibrated_on, configs)
    blocks += [_pattern_table(gaps, claims, calibrated_on, configs), _gap_table(gaps)]
    blocks.append("Misses and the parameters that move them:")
    blocks.extend(_explain_misses(gaps[role == "held out"], calibrated_on, inputs.sensitivity))
    own = gaps[(role == "calibration") & ~gaps["within"]]
    if not own.empty:
        blocks.append(f"On the calibration pattern itself {len(own)} cell(s) stay outside the target: "
                      + "; ".join(f"{r.config} {r.metric} {number(r.gap, 1, signed=True)} {r.unit}"
                                  for r in own.itertuples())
                      + ".")
    if inputs.sensitivity is not None and not inputs.sensitivity.empty:
        blocks.append(_effects_table(inputs.sensitivity,
                                     f"One-at-a-time sensitivity on {cfg.get('sweep_pattern', calibrated_on)}", btu))
    if inputs.sensitivity is not None and not inputs.sensitivity.empty:
        blocks.extend(preferred_alternatives(inputs.sensitivity, configs))
    if inputs.behaviours is not None and not inputs.behaviours.empty:
        blocks.append(_effects_table(inputs.behaviours,
                                     "Original-system behaviours of profile "
                                     f"{cfg.get('behaviour_profile', 'visp2017')}, "
                                     f"each toggled alone on {cfg.get('sweep_pattern', calibrated_on)}", btu))
    blocks.extend(inputs.notes)
    return Section("Fidelity", blocks)
