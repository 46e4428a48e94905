"""The report's "Fidelity" section: how far a profile calibrated on one pattern lands from the
published cells of the held-out ones, which claims hold, and the sweeps that explain the misses.

Present when the runs folder has a `fidelity/` folder written by `testbed fidelity`."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import pandas as pd

from reporting.claims import HOLDS
from reporting.fidelity_gaps import FIDELITY_FOLDER, cell_gaps, is_compliance, strongest, summarise_effects
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


def acceptance_gaps(comparison: pd.DataFrame) -> pd.DataFrame:
    """The cells the acceptance targets name: compliance (5 pp) and resource cost (15 %)."""
    gaps = cell_gaps(comparison)
    return gaps[[is_compliance(m) or m == "resource_cost" for m in gaps["metric"]]].reset_index(drop=True)


def _pattern_table(gaps: pd.DataFrame, claims: pd.DataFrame, calibrated_on: str) -> Table:
    rows = []
    for pattern in sorted(gaps["pattern"].unique()):
        own = gaps[gaps["pattern"] == pattern]
        comp, cost = own[own["unit"] == "pp"], own[own["unit"] == "%"]
        mine = claims[claims["pattern"] == pattern]
        held = int((mine["measured"] == HOLDS).sum())
        held_paper = int((mine["paper"] == HOLDS).sum())
        rows.append([pattern, "calibration" if pattern == calibrated_on else "held out",
                     f"{int(comp['within'].sum())}/{len(comp)}", number(comp["gap"].abs().max(), 1),
                     number(comp["gap"].mean(), 1, signed=True),
                     f"{int(cost['within'].sum())}/{len(cost)}", number(cost["gap"].abs().max(), 1),
                     number(cost["gap"].mean(), 1, signed=True), f"{held}/{len(mine)} (paper {held_paper})"])
    return Table("Per pattern: cells within target (compliance ±5 pp, resource cost ±15 %), largest and mean gap, "
                 "claims holding on the measured numbers",
                 ["pattern", "role", "compliance within", "max |gap| pp", "mean gap pp", "cost within",
                  "max |gap| %", "mean gap %", "claims holding"], rows)


def _gap_table(gaps: pd.DataFrame) -> Table:
    rows = [[r.pattern, r.config, r.metric, number(r.mean_paper), number(r.mean_measured),
             f"{number(r.gap, 1, signed=True)} {r.unit}", "yes" if r.within else "NO"] for r in gaps.itertuples()]
    return Table("Gap per published cell (measured − paper; compliance in pp, resource cost in % of the paper's mean)",
                 ["pattern", "configuration", "metric", "paper", "measured", "gap", "within target"], rows)


def _explain_misses(gaps: pd.DataFrame, calibrated_on: str, sensitivity: Optional[pd.DataFrame]) -> List[str]:
    misses = gaps[~gaps["within"]]
    if misses.empty:
        return ["Every compliance and resource-cost cell is within its target."]
    out = []
    for r in misses.itertuples():
        text = (f"{r.pattern} {r.config} {r.metric}: {number(r.gap, 1, signed=True)} {r.unit} "
                f"(target ±{r.tolerance:g} {r.unit}, missed by {abs(r.gap) - r.tolerance:.1f} {r.unit}).")
        if sensitivity is not None and not sensitivity.empty:
            moves = strongest(sensitivity[sensitivity["group"] == "parameter"], r.config, r.metric)
            if moves:
                text += (f" On {calibrated_on}, this cell moves most with: "
                         + "; ".join(f"{n} {v} ({d:+.1f}{' pp' if r.unit == 'pp' else ''})" for n, v, d in moves) + ".")
        out.append(text)
    return out


def _effects_table(table: pd.DataFrame, caption: str) -> Table:
    effects = summarise_effects(table)
    value_columns = [c for c in effects.columns if c not in ("group", "name", "variant", "distance")]
    headers = ["name", "variant", *[c.replace("_compliance_pct", " %").replace("_", " ") for c in value_columns],
               "distance"]
    rows = [[str(r["name"]), str(r["variant"]), *[number(r[c], 1, signed=True) for c in value_columns],
             number(r["distance"], 2)] for _, r in effects.iterrows()]
    profile_distance = float(table["profile_distance"].iloc[0]) if not table.empty else float("nan")
    return Table(f"{caption} (change against the profile: compliance in pp, resource cost in price units; "
                 f"btu = mean over BTU 10/30/60; distance to the pattern's published cells, the profile's own is "
                 f"{profile_distance:.2f})", headers, rows)


def fidelity_section(inputs: FidelityInputs, comparison: pd.DataFrame, claims: pd.DataFrame) -> Section:
    cfg = inputs.config
    calibrated_on = cfg.get("calibrated_on", "stepwise")
    gaps = acceptance_gaps(comparison)
    blocks: List[Block] = [
        f"Profile {cfg['profile']}, calibrated on {calibrated_on} alone, run unchanged on every pattern "
        f"({cfg['reps']} repetitions, seed {cfg['seed']}); the other patterns are held out. Targets: every "
        f"compliance cell within 5 pp and every resource-cost cell within 15 % of the published mean, and "
        f"every published claim holding.",
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
    blocks += [_pattern_table(gaps, claims, calibrated_on), _gap_table(gaps)]
    blocks.append("Misses and the parameters that move them:")
    blocks.extend(_explain_misses(gaps[gaps["pattern"] != calibrated_on], calibrated_on, inputs.sensitivity))
    own = gaps[(gaps["pattern"] == calibrated_on) & ~gaps["within"]]
    if not own.empty:
        blocks.append(f"On the calibration pattern itself {len(own)} cell(s) stay outside the target: "
                      + "; ".join(f"{r.config} {r.metric} {number(r.gap, 1, signed=True)} {r.unit}"
                                  for r in own.itertuples())
                      + ".")
    if inputs.sensitivity is not None and not inputs.sensitivity.empty:
        blocks.append(_effects_table(inputs.sensitivity,
                                     f"One-at-a-time sensitivity on {cfg.get('sweep_pattern', calibrated_on)}"))
    if inputs.behaviours is not None and not inputs.behaviours.empty:
        blocks.append(_effects_table(inputs.behaviours,
                                     "Original-system behaviours of profile "
                                     f"{cfg.get('behaviour_profile', 'visp2017')}, "
                                     f"each toggled alone on {cfg.get('sweep_pattern', calibrated_on)}"))
    blocks.extend(inputs.notes)
    return Section("Fidelity", blocks)
