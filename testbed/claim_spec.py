"""A paper's claim as data: what an evaluation's YAML declares under `evaluation.claims`, typed
and checked for shape before anything runs. reporting/claims.py checks the claims on the tables."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

# the comparisons a claim may name (reporting/claims.py has one check for each)
KIND_NAMES = ("greater", "less", "not_greater", "monotone_increasing", "ratio_at_most", "within")
EACH = "{each}"  # stands for each member of a claim's family


@dataclass
class ClaimSpec:
    """One claim as an evaluation's YAML declares it (`evaluation.claims[i]`)."""

    id: str = ""
    text: str = ""
    compare: str = ""  # a key of KINDS
    metrics: List[str] = field(default_factory=list)
    configs: List[str] = field(default_factory=list)  # the configurations the claim is about
    against: str = ""  # the configuration they are compared with ({btu}: the same BTU length)
    bound: float = 0.0  # ratio_at_most: the largest ratio configs / against; within: the tolerance
    allow: List[str] = field(default_factory=list)  # not_greater: "<config> <metric>" pairs that may be above
    labels: Dict[str, str] = field(default_factory=dict)  # how a metric is named in a detail
    holds: str = ""  # the detail of a claim that holds over several values
    # a family of configurations (`dabs`: dabs and every dabs-<variant>): the claim is checked once per
    # member measured, named for `{each}` in configs and against; the paper's side names the family
    each: str = ""
    fallback: Dict[str, str] = field(default_factory=dict)  # metric -> the one judged where it is missing
    fallback_note: str = ""  # added to the detail of a verdict judged on the fallback metrics
    at_least: Optional[float] = None  # greater, less: the configurations' values must also reach it
    decimals: int = 2  # of the values a detail shows


def validate(specs: Sequence[ClaimSpec], prefix: str = "evaluation.claims") -> None:
    """Raise ValueError("<prefix>[i].<key>: ...") for the first claim that cannot be checked."""
    seen: Dict[str, int] = {}
    for i, spec in enumerate(specs):
        where = f"{prefix}[{i}]"
        if not spec.id:
            raise ValueError(f"{where}.id: missing")
        if spec.id in seen:
            raise ValueError(f"{where}.id: {spec.id!r} repeats claim {seen[spec.id]}")
        seen[spec.id] = i
        if spec.compare not in KIND_NAMES:
            raise ValueError(f"{where}.compare: {spec.compare!r} is not one of {', '.join(KIND_NAMES)}")
        if not spec.metrics or not all(spec.metrics):
            raise ValueError(f"{where}.metrics: name at least one metric")
        if not spec.configs or not all(spec.configs):
            raise ValueError(f"{where}.configs: name at least one configuration")
        if spec.compare != "monotone_increasing" and not spec.against:
            raise ValueError(f"{where}.against: {spec.compare} compares with a configuration; name it")
        if spec.compare == "monotone_increasing" and len(spec.configs) < 2:
            raise ValueError(f"{where}.configs: monotone_increasing needs at least two configurations, in order")
        if spec.compare in ("ratio_at_most", "within") and not spec.bound > 0:
            raise ValueError(f"{where}.bound: {spec.compare} needs a bound > 0")
        _validate_extensions(spec, where)


def _validate_extensions(spec: ClaimSpec, where: str) -> None:
    if spec.each and EACH not in [*spec.configs, spec.against]:
        raise ValueError(f"{where}.each: name {EACH} in configs or against")
    if not spec.each and EACH in [*spec.configs, spec.against]:
        raise ValueError(f"{where}.each: {EACH} is named; say which family it stands for")
    unknown = sorted(set(spec.fallback) - set(spec.metrics))
    if unknown:
        raise ValueError(f"{where}.fallback: {unknown[0]!r} is not one of the claim's metrics")
    if spec.at_least is not None and spec.compare not in ("greater", "less"):
        raise ValueError(f"{where}.at_least: only greater and less take a floor")
    if not 0 <= spec.decimals <= 10:
        raise ValueError(f"{where}.decimals: {spec.decimals} is not in [0, 10]")
