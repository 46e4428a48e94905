"""Which unknown moves which metric: one-at-a-time sweeps around a profile, and the effect of each
original-system behaviour that the visp2017 profile switches on.

Both produce long tables of (variant, cell) with the measured value, the profile's own value and
the difference; cells are those of the published table (reporting.paper_comparison.compare).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, TextIO, Tuple

import pandas as pd
from omegaconf import OmegaConf

from testbed.arguments import flatten
from testbed.config import CONF_DIR
from testbed.fidelity.evaluation import Loop, compose_experiment, evaluate
from testbed.fidelity.parameters import current_values, literal, to_overrides

CELL_COLUMNS = ["config", "metric", "mean_paper", "mean_measured", "gap", "unit", "kind", "normalised_gap"]


@dataclass(frozen=True)
class Variant:
    group: str  # "parameter", "alternative" or "behaviour"
    name: str  # the parameter or the config key
    label: str  # e.g. x0.5, x2, true, "paper: 50"
    overrides: Tuple[str, ...]


def parameter_variants(loop: Loop, profile: str, pattern: str) -> List[Variant]:
    """Each search-space parameter moved alone away from the profile's value (x0.5 and x2, the
    neighbouring integers, the other categories)."""
    cfg = compose_experiment([f"evaluation={loop.evaluation}", f"pattern={pattern}", f"profile={profile}"],
                             loop.conf_dir)
    out = []
    for group, space in (("parameter", loop.spec.parameters), ("alternative", loop.spec.alternatives)):
        values = current_values(cfg, space)
        for p in space:
            for label, value in p.variants(values[p.name]):
                out.append(Variant(group, p.name, label, tuple(to_overrides({p.name: value}, space))))
    return out


# Keys that form one behaviour and are switched together (the thresholds only make sense as a set).
BEHAVIOUR_GROUPS: Dict[str, str] = {
    "policies.threshold.up_threshold": "thresholds", "policies.threshold.up2_threshold": "thresholds",
    "policies.threshold.down_threshold": "thresholds",
    "policies.btu.trigger_variant": "trigger", "policies.btu.trigger_queue_alone": "trigger",
}


def behaviour_variants(profile: str, pattern: str, behaviour_profile: str = "visp2017",
                       plain_profile: str = "paper", conf_dir: Path = CONF_DIR,
                       evaluation: str = "btu") -> List[Variant]:
    """Per behaviour the behaviour profile switches on (a key, or a group of BEHAVIOUR_GROUPS): the
    profile with it toggled between the plain profile's values (off) and the behaviour profile's
    (on), whichever the profile lacks."""
    behaviours = OmegaConf.to_container(OmegaConf.load(Path(conf_dir) / "profile" / f"{behaviour_profile}.yaml"))
    assert isinstance(behaviours, dict)
    def composed(p: str) -> Any:
        return OmegaConf.structured(compose_experiment([f"evaluation={evaluation}", f"pattern={pattern}",
                                                        f"profile={p}"], conf_dir))

    plain, mine = composed(plain_profile), composed(profile)
    groups: Dict[str, List[Tuple[str, Any]]] = {}
    for key, on in sorted(flatten(behaviours).items()):
        if key != "profile":
            groups.setdefault(BEHAVIOUR_GROUPS.get(key, key), []).append((key, _plain(on)))
    out = []
    for name, members in groups.items():
        has = all(_plain(OmegaConf.select(mine, key)) == on for key, on in members)
        target = [(key, _plain(OmegaConf.select(plain, key)) if has else on) for key, on in members]
        values = "/".join(str(v) for _, v in target)
        label = f"off ({plain_profile}: {values})" if has else f"on ({values})"
        out.append(Variant("behaviour", name, label, tuple(f"{key}={literal(v)}" for key, v in target)))
    return out


def _plain(v: Any) -> Any:
    return getattr(v, "value", v)


def sweep(loop: Loop, profile: str, pattern: str, variants: Sequence[Variant], reps: int = 1, seed: int = 1,
          log: Optional[TextIO] = None) -> pd.DataFrame:
    """Run the profile and each variant on one pattern (same seeds); per variant and published cell:
    the measured value, the profile's value and the difference, plus the variant's distance."""
    def run(extra: Sequence[str]) -> Tuple[pd.DataFrame, float]:
        summary, d = evaluate(loop.setting(pattern, profile, reps, seed, None, extra), loop)
        return loop.cells(summary, pattern)[CELL_COLUMNS], d.value

    base_cells, base_distance = run(())
    frames = []
    for i, v in enumerate(variants, 1):
        cells, d = run(v.overrides)
        merged = cells.merge(base_cells[["config", "metric", "mean_measured", "normalised_gap"]],
                             on=["config", "metric"], suffixes=("", "_profile"))
        merged = merged.rename(columns={"mean_measured": "measured", "mean_measured_profile": "profile_value",
                                        "normalised_gap_profile": "profile_normalised_gap"})
        merged.insert(0, "variant", v.label)
        merged.insert(0, "name", v.name)
        merged.insert(0, "group", v.group)
        merged["delta"] = merged["measured"] - merged["profile_value"]
        merged["distance"] = d
        merged["profile_distance"] = base_distance
        merged["overrides"] = " ".join(v.overrides)
        frames.append(merged)
        if log:
            print(f"{v.group} {i}/{len(variants)} {v.name} {v.label}: distance {d:.3f} (profile {base_distance:.3f})",
                  file=log, flush=True)
    columns = ["group", "name", "variant", "config", "metric", "mean_paper", "measured", "profile_value", "delta",
               "unit", "kind", "normalised_gap", "profile_normalised_gap", "distance", "profile_distance", "overrides"]
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)
