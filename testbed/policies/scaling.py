"""Scaling targets (`ScaleTo`: 'operator X should have n instances'), realised in one place for
both modes.

Operator mode: new instances go where the placement strategy says (leasing hosts as needed),
surplus ones are the newest; the policy's plan is updated, so later decisions of the same cycle see
them. Job mode: the job's backends (testbed/job/loop.py, testbed/live/job.py) read the target of a
policy's actions with `job_rescale`, which also gives the per-worker records of the rescale (workers
added, or removed newest first). Per-vertex mode: `vertex_rescale` reads a target per vertex."""
from __future__ import annotations

from typing import Collection, Dict, List, Mapping, Optional, Sequence, Tuple

from testbed.model import Action, ScaleDown, ScaleTo, ScaleUp
from testbed.placement.base import Placement
from testbed.plan import Plan
from testbed.policies.job_inputs import JOB_OPERATOR


def realise(plan: Plan, target: ScaleTo, placement: Placement) -> List[Action]:
    """Operator mode: the actions that bring `target.operator` to `target.n` instances (at least as
    far as the host limit allows); nothing when it has them already."""
    return scale_to(plan, target.operator, target.n, placement, target.reason)


def scale_to(plan: Plan, operator: str, n: int, placement: Placement, reason: str) -> List[Action]:
    """`realise` of ScaleTo(operator, n, reason)."""
    current = plan.n[operator]
    if n > current:
        return placement.start(plan, operator, n - current, reason)
    actions: List[Action] = []
    for _ in range(current - n):
        found = plan.newest_instance(operator)
        if found is None:
            break
        host, instance = found
        plan.remove(host, instance)
        actions.append(ScaleDown(operator, instance, host, reason))
    return actions


def target_of(operator: str, current: int, n: Optional[int], reason: str) -> Optional[ScaleTo]:
    """A controller's answer as a target: None when it has none or it is the current count."""
    return None if n is None or n == current else ScaleTo(operator, n, reason)


def job_rescale(current: int, actions: Sequence[Action], top: int) -> Optional[Tuple[int, List[Action]]]:
    """Job mode: the parallelism a policy's actions ask for, clamped into [1, top], and the
    per-worker actions the `actions` table records for it (one per worker the target adds or
    removes, the newest workers first); None when the parallelism stays."""
    targets = []
    for a in actions:
        if not isinstance(a, ScaleTo) or a.operator != JOB_OPERATOR:
            raise TypeError(f"job mode takes a ScaleTo of {JOB_OPERATOR!r}, got {a!r}")
        targets.append(a)
    if not targets:
        return None
    wanted = targets[-1]
    n = min(max(wanted.n, 1), top)
    if n == current:
        return None
    return n, per_worker(current, wanted.n, wanted.reason)


def per_worker(current: int, target: int, reason: str) -> List[Action]:
    """A rescale as one action per worker added or removed (the newest workers go first)."""
    if target > current:
        return [ScaleUp(JOB_OPERATOR, JOB_OPERATOR, reason) for _ in range(target - current)]
    return [ScaleDown(JOB_OPERATOR, f"w{i}", JOB_OPERATOR, reason) for i in range(current - 1, target - 1, -1)]


def vertex_rescale(current: Mapping[str, int], actions: Sequence[Action], top: int,
                   scalable: Collection[str]) -> Optional[Tuple[Dict[str, int], List[Action]]]:
    """Per-vertex mode: every scalable vertex's parallelism after a policy's `ScaleTo`s (each clamped
    into [1, top], the others as they are), and one action per subtask each adds or removes; None when
    nothing changes. A target for a vertex that cannot be scaled is an error of the policy."""
    targets = {name: int(current[name]) for name in scalable}
    reasons: Dict[str, str] = {}
    for a in actions:
        if not isinstance(a, ScaleTo) or a.operator not in targets:
            raise TypeError(f"per-vertex mode takes a ScaleTo of one of {sorted(targets)}, got {a!r}")
        targets[a.operator] = min(max(a.n, 1), top)
        reasons[a.operator] = a.reason
    if targets == {name: int(current[name]) for name in scalable}:
        return None
    records: List[Action] = []
    for name, n in targets.items():
        was, reason = int(current[name]), reasons.get(name, "")
        records += [ScaleUp(name, name, reason) for _ in range(was, n)]
        records += [ScaleDown(name, f"{name}-{i}", name, reason) for i in range(was - 1, n - 1, -1)]
    return targets, records
