"""The simulator's unknowns: values the paper never published, as a search space over config keys.

Each parameter sets one or more keys of the experiment config (testbed/config.py) and is searched
within bounds chosen from what the papers and the description of the original system
(docs/papers/btu-provisioning.md#original-visp-implementation) say about it. Values are rounded to
three significant digits before use, so a written profile holds exactly the values that were
evaluated.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any, Dict, List, Mapping, Sequence, Tuple

OPERATORS: Tuple[str, ...] = ("O1", "O2", "O3", "O4", "O5", "O6", "O7", "O8", "O9")


class Kind(str, Enum):
    log_float = "log_float"  # searched on a log scale (scales such as service times)
    float = "float"
    int = "int"
    categorical = "categorical"


@dataclass(frozen=True)
class Parameter:
    name: str
    kind: Kind
    keys: Tuple[str, ...]  # config keys (dotted) that all take the value
    low: float = 0.0
    high: float = 0.0
    choices: Tuple[Any, ...] = ()
    range_ratio: float = 0.0  # > 0: the keys are [low, high] ranges written as [value*ratio, value]
    doc: str = ""

    def config_values(self, value: Any) -> Dict[str, Any]:
        """Config key -> value this parameter's value sets."""
        if self.range_ratio > 0:
            return {k: [round3(value * self.range_ratio), value] for k in self.keys}
        return {k: value for k in self.keys}

    def variants(self, value: Any) -> List[Tuple[str, Any]]:
        """The one-at-a-time sensitivity settings around a calibrated value: (label, value)."""
        if self.kind == Kind.categorical:
            return [(f"{c}", c) for c in self.choices if c != value]
        if self.kind == Kind.int:
            return [(f"{v}", v) for v in (value - 1, value + 1) if self.low <= v <= self.high]
        return [("x0.5", round3(value * 0.5)), ("x2", round3(value * 2.0))]


def round3(x: float) -> float:
    """Three significant digits: readable profiles, and the profile equals what was evaluated."""
    if x == 0:
        return 0.0
    return float(round(x, 2 - int(math.floor(math.log10(abs(x))))))


def _ops(names: Sequence[str], leaf: str) -> Tuple[str, ...]:
    return tuple(f"topology.operators.{o}.service.{leaf}" for o in names)


SEARCH_SPACE: Tuple[Parameter, ...] = (
    Parameter("o1_service_ms", Kind.log_float, _ops(["O1"], "mean_ms"), 200, 2000,
              doc="O1's mean service time (an OCR run, ~450 ms in the original, plus publishing)"),
    Parameter("filter_service_ms", Kind.log_float, _ops(["O2", "O6"], "mean_ms"), 5, 300,
              doc="O2/O6 mean service time (a 20 ms sleep plus a new broker connection per publish)"),
    Parameter("kpi_service_ms", Kind.log_float, _ops(["O3", "O4", "O5"], "mean_ms"), 10, 500,
              doc="O3/O4/O5 mean service time (~50 ms sleep plus Redis counters)"),
    Parameter("light_service_ms", Kind.log_float, _ops(["O7", "O8", "O9"], "mean_ms"), 1, 200,
              doc="O7/O8/O9 mean service time (a few ms of work)"),
    Parameter("service_cv", Kind.float, _ops(OPERATORS, "cv"), 0.05, 1.5,
              doc="coefficient of variation of every operator's service time"),
    Parameter("parallel", Kind.int, _ops(OPERATORS, "parallel"), 1, 3,
              doc="items in service at once per instance (one consumer per incoming queue)"),
    Parameter("hop_latency_ms", Kind.log_float, ("backend.hop_latency_ms",), 1, 500,
              doc="broker hop from the upstream send into the next queue"),
    Parameter("container_start_s", Kind.float, ("infrastructure.container_start_s",), 5, 60, range_ratio=0.5,
              doc="container start once the image is there: uniform [value/2, value] (paper: 5-10 s)"),
    Parameter("lease_delay_s", Kind.float, ("infrastructure.lease_delay_s",), 10, 240, range_ratio=0.5,
              doc="VM lease until ready: uniform [value/2, value] (paper: 30-60 s)"),
    Parameter("pull_mb_per_s", Kind.log_float, ("infrastructure.pull_mb_per_s",), 2, 100,
              doc="image pull bandwidth on a host without the image (image pull time = image_mb / this)"),
    Parameter("cpu_contention", Kind.categorical, ("backend.cpu_contention",), choices=(False, True),
              doc="busy slots needing more cores than the host has slow all its instances"),
    Parameter("measurement", Kind.categorical, ("runtime.measurement",),
              choices=("milliseconds", "seconds_truncated"),
              doc="durations from millisecond send times, or from AMQP's whole-second timestamps"),
    Parameter("initial_instances", Kind.int, ("runtime.initial_instances",), 1, 3,
              doc="instances per operator type in the initial deployment"),
)

BY_NAME: Dict[str, Parameter] = {p.name: p for p in SEARCH_SPACE}


def config_values(values: Mapping[str, Any]) -> Dict[str, Any]:
    """Config key -> value for a full or partial assignment of the search space."""
    out: Dict[str, Any] = {}
    for name, value in values.items():
        out.update(BY_NAME[name].config_values(value))
    return out


def to_overrides(values: Mapping[str, Any]) -> List[str]:
    """Hydra command-line overrides for an assignment (lists as [a,b], booleans lower case)."""
    return [f"{key}={literal(v)}" for key, v in sorted(config_values(values).items())]


def literal(v: Any) -> str:
    """A value as Hydra override syntax."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(literal(x) for x in v) + "]"
    return str(v)


def current_values(cfg: Any) -> Dict[str, Any]:
    """The search-space values a resolved config holds (first key of each parameter; the upper end
    of a range), clipped to the parameter's bounds. `cfg` is an ExperimentConfig."""
    from omegaconf import OmegaConf

    node = OmegaConf.structured(cfg)
    out: Dict[str, Any] = {}
    for p in SEARCH_SPACE:
        value = OmegaConf.select(node, p.keys[0])
        if p.range_ratio > 0:
            value = value[1]
        if p.kind == Kind.categorical:
            value = getattr(value, "value", value)
            out[p.name] = value if value in p.choices else p.choices[0]
        elif p.kind == Kind.int:
            out[p.name] = int(min(max(value, p.low), p.high))
        else:
            out[p.name] = round3(min(max(float(value), p.low), p.high))
    return out
