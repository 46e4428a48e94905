"""What a policy is to the run around it: the `Policy` base class, whose every hook has a null
default, and the marker of the parameter fields that are times.

Both backends and both modes call the hooks directly; a policy overrides the ones it needs:

* `decide(snapshot)`: operator mode, every reasoning cycle (`runtime.reasoning_s`): the actions of
  this cycle. Default: none.
* `decide_job(snapshot)`: job mode (testbed/sim/job.py, testbed/live/job.py), every `interval_s`
  seconds: a `ScaleTo` of the job operator, or nothing. Default: none (the job keeps its workers).
* `interval_s`: job mode's decision interval; None: `decide_job` is never called.
* `decide_vertices(snapshot)`: job mode on an engine that sets each vertex's parallelism (Flink's
  adaptive scheduler), every `interval_s`: a `ScaleTo` per vertex to change, or nothing. Only a
  policy that overrides it can run in that mode (`decides_per_vertex`).
* `initial_deployment(snapshot)`: the deployment at t = 0, called until it returns nothing (so a
  policy may lease hosts first and place instances on them next). Default None: the deployment
  every run starts from (testbed/policies/base.py).
* `initial_parallelism(max_scaleout)`: job mode's workers at the start; None: the job's own.
* `records()`: the policy's own event-log tables ({table: {column: values}}). Default: none.
* `run_details()`: what the manifest records about the policy's run (`details.controller`); None:
  nothing.
* `placement`: the strategy that places its new instances; the `placements` table reads the solver
  runs of a strategy that solves (ODP). None: no strategy of its own.

A policy is pure: it never reads a clock, sleeps or does I/O; its state derives from the snapshots
it has seen.

Parameters are a dataclass (`policies.<name>.*`); a field declared with `time_field` is a time in
seconds that live job mode divides by its compression factor (testbed/live/job_compression.py).
"""
from __future__ import annotations

from dataclasses import MISSING, Field, field, fields
from typing import Any, Dict, List, Optional, Tuple

from testbed.model import Action, Snapshot
from testbed.policies.job_inputs import JobSnapshot, VertexSnapshot

TIME = "testbed.time"  # field metadata key: the field is a time in seconds


def time_field(default: Any = MISSING, **kwargs: Any) -> Any:
    """A parameter that is a time in seconds (an int stays an int when compressed)."""
    metadata = {**kwargs.pop("metadata", {}), TIME: True}
    return field(default=default, metadata=metadata, **kwargs)


def time_fields(params: Any) -> Tuple[str, ...]:
    """The names of a parameter dataclass's time fields, in declaration order."""
    return tuple(f.name for f in fields(params) if is_time(f))


def is_time(f: Field) -> bool:
    return bool(f.metadata.get(TIME, False))


class Policy:
    """The base class of every policy (see the module's docstring for the hooks)."""

    name: str = ""  # set by register_policy
    placement: Any = None  # a testbed.placement.base.Placement, or None
    interval_s: Optional[float] = None

    def decide(self, snapshot: Snapshot) -> List[Action]:
        return []

    def decide_job(self, snapshot: JobSnapshot) -> List[Action]:
        return []

    def decide_vertices(self, snapshot: VertexSnapshot) -> List[Action]:
        return []

    def initial_deployment(self, snapshot: Snapshot) -> Optional[List[Action]]:
        return None

    def initial_parallelism(self, max_scaleout: int) -> Optional[int]:
        return None

    def records(self) -> Dict[str, Dict[str, list]]:
        return {}

    def run_details(self) -> Optional[Dict[str, Any]]:
        return None


def decides_per_vertex(cls: Any) -> bool:
    """Whether a policy class decides each vertex's parallelism (overrides `decide_vertices`)."""
    return isinstance(cls, type) and getattr(cls, "decide_vertices", None) is not Policy.decide_vertices
