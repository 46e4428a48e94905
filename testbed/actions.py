"""How a policy's actions are carried out, written once for both backends: the dispatch, the
records of the `actions` table, and the interface a backend implements (`ActionTarget`: the
simulated cluster, or the live executor on Docker hosts).

Host references of hosts leased earlier in the same list (`new:...`) are bound here. Scale-ups and
scale-downs count as scalings of their operator (the BTU policy's utility uses them).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Protocol, Sequence

from testbed.model import (
    NEW_HOST_PREFIX,
    Action,
    LeaseHost,
    Migrate,
    ProlongHost,
    ReleaseHost,
    Restart,
    ScaleDown,
    ScaleTo,
    ScaleUp,
    SetActive,
)

# a Restart's record says what became of the sources' arrivals during its downtime (Restart.source)
SOURCE_WHAT = {"queue": "", "hold": ", arrivals held at the source", "drop": ", arrivals dropped at the source",
               "pause": ", the sources' trace paused"}


@dataclass(frozen=True)
class ActionRecord:
    """One row of the `actions` table."""

    t_s: float
    action: str
    operator: Optional[str]
    instance: Optional[str]
    host: Optional[str]
    target_host: Optional[str]
    reason: str


class ActionTarget(Protocol):
    """What a backend does for each kind of action; `dispatch` calls it and keeps the records."""

    def lease(self, t: float, immediate: bool) -> str:
        """A new host; returns its id."""

    def start(self, t: float, operator: str, host: str, immediate: bool) -> str:
        """A new instance; returns its id."""

    def stop(self, t: float, instance: str) -> None:
        """Drain and stop an instance."""

    def migrate(self, t: float, operator: str, instance: str, target: str, immediate: bool) -> str:
        """Start a copy on `target`; the old instance stops once the copy runs. Returns the copy's id."""

    def prolong(self, t: float, host: str) -> None: ...

    def release(self, t: float, host: str) -> None:
        """Release once the host's instances have stopped, at the latest at its BTU end."""

    def set_active(self, t: float, operator: str, active: int) -> Mapping[str, bool]:
        """Switch instances of a pool on or off; returns {instance: now active} of those switched."""

    def restart(self, t: float, downtime_s: float, purge: bool, purge_entry: bool = True) -> Mapping[str, int]:
        """Stop the world for `downtime_s`; returns the items purged per operator (empty without purge;
        without purge_entry, the operators fed by a source keep what waits in those queues)."""

    # optional: a backend that can act on its sources has
    # source_downtime(t, until, mode): the sources' arrivals in [t, until) held, dropped or paused


def dispatch(t: float, actions: Sequence[Action], target: ActionTarget, records: List[ActionRecord],
             scalings: Dict[str, int], immediate: bool = False) -> None:
    """Carry out `actions` in order on `target`, appending one record per action (pool switches:
    one per instance switched)."""
    bound: Dict[str, str] = {}

    def resolve(ref: str) -> str:
        return bound[ref] if ref.startswith(NEW_HOST_PREFIX) else ref

    def record(a: Action, operator: Optional[str] = None, instance: Optional[str] = None, host: Optional[str] = None,
               target_host: Optional[str] = None, kind: Optional[str] = None, reason: Optional[str] = None) -> None:
        records.append(ActionRecord(t, kind or a.kind, operator, instance, host, target_host, reason or a.reason))

    for a in actions:
        if isinstance(a, LeaseHost):
            bound[a.host] = host = target.lease(t, immediate)
            record(a, host=host)
        elif isinstance(a, ScaleUp):
            host = resolve(a.host)
            instance = target.start(t, a.operator, host, immediate)
            scalings[a.operator] += 1
            record(a, a.operator, instance, host)
        elif isinstance(a, ScaleDown):
            target.stop(t, a.instance)
            scalings[a.operator] += 1
            record(a, a.operator, a.instance, a.host)
        elif isinstance(a, Migrate):
            to = resolve(a.target)
            target.migrate(t, a.operator, a.instance, to, immediate)
            record(a, a.operator, a.instance, a.host, to)
        elif isinstance(a, ProlongHost):
            target.prolong(t, a.host)
            record(a, host=a.host)
        elif isinstance(a, ReleaseHost):
            host = resolve(a.host)
            target.release(t, host)
            record(a, host=host)
        elif isinstance(a, SetActive):
            for instance, on in target.set_active(t, a.operator, a.active).items():
                record(a, a.operator, instance, kind="activate" if on else "deactivate",
                       reason=f"{a.reason} ({a.active} active)")
        elif isinstance(a, Restart):
            purged = target.restart(t, a.downtime_s, a.purge, a.purge_entry)
            what = f"queues purged: {sum(purged.values())} item(s)" if a.purge else "queues kept"
            if a.purge and not a.purge_entry:
                what += " (entry queues kept)"
            gate = getattr(target, "source_downtime", None) if a.source != "queue" else None
            if gate is not None:  # a backend that can (the simulator's sources, the live provider)
                gate(t, t + a.downtime_s, a.source)
                what += SOURCE_WHAT[a.source]
            record(a, reason=f"{a.reason} (downtime {a.downtime_s:g} s, {what})")
        elif isinstance(a, ScaleTo):
            raise TypeError(f"a scaling target reached the backend unrealised: {a!r} (operator mode: "
                            "realise it on the policy's plan, testbed/policies/scaling.py)")
        else:  # pragma: no cover - the Action union is closed
            raise TypeError(f"unknown action {a!r}")


def actions_table(records: Sequence[ActionRecord], policy: str) -> Dict[str, List[Optional[object]]]:
    """The event log's `actions` table (both backends)."""
    keys = ("t_s", "action", "operator", "instance", "host", "target_host", "reason")
    cols: Dict[str, List[Optional[object]]] = {k: [getattr(r, k) for r in records] for k in keys}
    cols["policy"] = [policy] * len(records)
    return cols
