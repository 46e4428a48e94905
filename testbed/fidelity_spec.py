"""An evaluation's fidelity loop as data: what its YAML declares under `evaluation.fidelity`, typed
and checked for shape before anything runs. testbed/fidelity/ runs the loop (`testbed calibrate`,
`testbed fidelity`); reporting/fidelity_gaps.py measures each published cell by its kind.

* `parameters`: the unknowns the paper never published, each a search range over config keys;
* `alternatives`: unknowns that only held-out cells can judge (a baseline's own behaviour when only
  the other approach's cells are searched): never fitted; `testbed fidelity` runs each value and
  the report says which one the held-out cells prefer;
* `fixed`: values measured elsewhere (a real engine, the live testbed) that every trial uses and
  the written profile keeps, so they are never fitted;
* `cells`: how each published metric's gap is measured (a metric name or a glob -> a cell kind);
* `calibrate_on`: the one workload whose published cells the search sees (only those of
  `calibrate_configs` when it names configurations: the others are held out); `validate_on`: the
  held-out workloads (`<workload>` of this evaluation, or `<evaluation>:<workload>` of a variant).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

PARAMETER_KINDS = ("log_float", "float", "int", "categorical")

# How a cell's gap is measured, and the tolerance a gap of exactly 1 (normalised) stands for:
#   points   - a percentage: measured - published, in percentage points (5 pp)
#   share    - a fraction in [0, 1]: 100 x (measured - published), in percentage points (5 pp)
#   relative - a count or cost: 100 x (measured - published) / published, in % (15 %)
#   ratio    - a latency: measured / published; |ln ratio| / ln 1.3, so x1.3 and x1/1.3 are on the edge
#   absolute - a small count whose published value may be 0: measured - published (1 unit)
CELL_KINDS: Dict[str, float] = {"points": 5.0, "share": 5.0, "relative": 15.0, "ratio": 30.0, "absolute": 1.0}


def round3(x: float) -> float:
    """Three significant digits: readable profiles, and a profile equals what was evaluated."""
    if x == 0:
        return 0.0
    return float(round(x, 2 - int(math.floor(math.log10(abs(x))))))


@dataclass
class FidelityParameter:
    """One unknown: a value searched within [low, high] (or among choices) that sets config keys."""

    name: str = ""
    kind: str = "float"  # one of PARAMETER_KINDS; log_float is searched on a log scale
    keys: List[str] = field(default_factory=list)  # config keys (dotted) that all take the value
    low: float = 0.0
    high: float = 0.0
    choices: List[Any] = field(default_factory=list)  # categorical
    range_ratio: float = 0.0  # > 0: the keys are [low, high] ranges written as [value*ratio, value]
    factors: List[float] = field(default_factory=list)  # per key: the key takes value x factor (one scale)
    doc: str = ""

    def config_values(self, value: Any) -> Dict[str, Any]:
        """Config key -> value this parameter's value sets."""
        if self.range_ratio > 0:
            return {k: [round3(value * self.range_ratio), value] for k in self.keys}
        if self.factors:
            return {k: round3(value * f) for k, f in zip(self.keys, self.factors, strict=True)}
        return {k: value for k in self.keys}

    def value_of(self, first_key_value: Any) -> Any:
        """The parameter's value behind its first key's value."""
        if self.range_ratio > 0:
            return first_key_value[1]
        return first_key_value / self.factors[0] if self.factors else first_key_value

    def variants(self, value: Any) -> List[Tuple[str, Any]]:
        """The one-at-a-time sensitivity settings around a calibrated value: (label, value)."""
        if self.kind == "categorical":
            return [(f"{c}", c) for c in self.choices if c != value]
        if self.kind == "int":
            return [(f"{v}", v) for v in (value - 1, value + 1) if self.low <= v <= self.high]
        return [("x0.5", round3(value * 0.5)), ("x2", round3(value * 2.0))]


@dataclass
class FidelitySpec:
    """`evaluation.fidelity`: empty (no parameters) when the evaluation has no fidelity loop."""

    calibrate_on: str = ""
    calibrate_configs: List[str] = field(default_factory=list)  # whose cells the search sees; empty: all
    validate_on: List[str] = field(default_factory=list)
    base_profile: str = "paper"  # the profile the calibrated values are written on top of
    profile: str = ""  # the profile `testbed calibrate` writes
    budget: int = 60  # trials of a calibration
    startup_trials: int = 12  # random trials before the sampler models the distance
    reps: int = 1  # repetitions per trial (the same seeds in every trial)
    duration_min: float = 0.0  # > 0: a trial's simulated minutes; 0: the evaluation's own
    cells: Dict[str, str] = field(default_factory=dict)  # published metric (or glob) -> a key of CELL_KINDS
    parameters: List[FidelityParameter] = field(default_factory=list)
    alternatives: List[FidelityParameter] = field(default_factory=list)  # judged on held-out cells only
    fixed: Dict[str, Any] = field(default_factory=dict)  # config key -> measured value, never searched
    behaviour_profile: str = ""  # a profile whose switches `testbed fidelity` toggles one at a time
    plain_profile: str = ""  # the values those switches take when off

    @property
    def declared(self) -> bool:
        return bool(self.parameters)

    def set_keys(self) -> List[Tuple[str, str]]:
        """(where under evaluation.fidelity, config key) of every key the loop sets."""
        searched = [(f"{group}[{i}].keys", k) for group in ("parameters", "alternatives")
                    for i, p in enumerate(getattr(self, group)) for k in p.keys]
        return searched + [(f"fixed.{k}", k) for k in self.fixed]

    def workloads(self) -> List[Tuple[str, str]]:
        """(evaluation, workload) of the held-out cells; '' as evaluation: this one."""
        return [tuple(w.split(":", 1)) if ":" in w else ("", w) for w in self.validate_on]  # type: ignore[misc]


def cell_kind(metric: str, cells: Mapping[str, str]) -> Optional[str]:
    """The kind (a key of CELL_KINDS) of a published metric; None: not a cell."""
    if metric in cells:
        return cells[metric]
    return next((kind for pattern, kind in cells.items() if fnmatchcase(metric, pattern)), None)


def validate(spec: FidelitySpec, workloads: Sequence[str], prefix: str = "evaluation.fidelity") -> None:
    """Raise ValueError("<prefix>.<key>: ...") for the first thing a fidelity loop could not run."""
    if not spec.declared:
        return
    if spec.calibrate_on not in workloads:
        raise ValueError(f"{prefix}.calibrate_on: {spec.calibrate_on!r} is not one of the evaluation's "
                         f"workloads {list(workloads)}")
    for i, w in enumerate(spec.validate_on):
        name = w.split(":", 1)[-1]
        if not name or (":" not in w and name not in workloads):
            raise ValueError(f"{prefix}.validate_on[{i}]: {w!r} is neither one of the workloads {list(workloads)} "
                             "nor <evaluation>:<workload>")
    if not spec.profile.isidentifier():
        raise ValueError(f"{prefix}.profile: name the profile to write (a plain name), got {spec.profile!r}")
    if spec.profile == spec.base_profile:
        raise ValueError(f"{prefix}.profile: must differ from base_profile")
    for key in ("budget", "reps"):
        if getattr(spec, key) < 1:
            raise ValueError(f"{prefix}.{key}: must be >= 1, got {getattr(spec, key)}")
    if spec.startup_trials < 0 or spec.duration_min < 0:
        raise ValueError(f"{prefix}.{'startup_trials' if spec.startup_trials < 0 else 'duration_min'}: must be >= 0")
    if not spec.cells:
        raise ValueError(f"{prefix}.cells: name the published metrics the distance weighs, with their kinds")
    for metric, kind in spec.cells.items():
        if kind not in CELL_KINDS:
            raise ValueError(f"{prefix}.cells.{metric}: {kind!r} is not one of {', '.join(CELL_KINDS)}")
    _validate_parameters(spec.parameters, f"{prefix}.parameters")
    _validate_parameters(spec.alternatives, f"{prefix}.alternatives")
    names = {p.name for p in spec.parameters}
    for i, p in enumerate(spec.alternatives):
        if p.name in names or set(p.keys) & {k for q in spec.parameters for k in q.keys}:
            raise ValueError(f"{prefix}.alternatives[{i}].name: {p.name!r} is also a searched parameter")
    if spec.alternatives and not (spec.calibrate_configs or spec.validate_on):
        raise ValueError(f"{prefix}.alternatives: nothing is held out to judge them (calibrate_configs, validate_on)")
    searched = {k for p in [*spec.parameters, *spec.alternatives] for k in p.keys}
    for key in spec.fixed:
        if key in searched:
            raise ValueError(f"{prefix}.fixed.{key}: also searched by a parameter; a measured value is not fitted")
    if bool(spec.behaviour_profile) != bool(spec.plain_profile):
        raise ValueError(f"{prefix}.plain_profile: behaviour_profile and plain_profile go together")


def _validate_parameters(parameters: Sequence[FidelityParameter], prefix: str) -> None:
    seen: Dict[str, int] = {}
    for i, p in enumerate(parameters):
        where = f"{prefix}[{i}]"
        if not p.name.isidentifier():
            raise ValueError(f"{where}.name: a plain name, got {p.name!r}")
        if p.name in seen:
            raise ValueError(f"{where}.name: {p.name!r} repeats parameter {seen[p.name]}")
        seen[p.name] = i
        if p.kind not in PARAMETER_KINDS:
            raise ValueError(f"{where}.kind: {p.kind!r} is not one of {', '.join(PARAMETER_KINDS)}")
        if not p.keys or not all(p.keys):
            raise ValueError(f"{where}.keys: name at least one config key")
        if p.kind == "categorical":
            if len(p.choices) < 2:
                raise ValueError(f"{where}.choices: a categorical parameter needs at least two choices")
        elif not p.low < p.high or (p.kind == "log_float" and p.low <= 0):
            positive = " and low > 0 (log scale)" if p.kind == "log_float" else ""
            raise ValueError(f"{where}.low: need low < high{positive}, got [{p.low}, {p.high}]")
        if p.factors and (len(p.factors) != len(p.keys) or p.kind == "categorical" or p.range_ratio
                          or not all(f > 0 for f in p.factors)):
            raise ValueError(f"{where}.factors: one factor > 0 per key, for a numeric parameter without range_ratio")
        if p.range_ratio < 0 or p.range_ratio >= 1:
            raise ValueError(f"{where}.range_ratio: must be in [0, 1), got {p.range_ratio}")
