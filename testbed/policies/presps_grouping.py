"""PRESPS's load-balancing grouping (the paper's Algorithm 2) and the authors' code's weighted random
choice, as routing rules over the active replicas of one operator (docs/papers/presps.md
#load-balancing-grouping).

Algorithm 2 (with this project's decisions: scan every active replica, saturation is U >= 1, U reset
to the measured values at each interval end):

    U_j = mu_j * et / td            # utilisation of replica j in the last interval (Eq. 7)
    per event: m = the replica with the smallest U (first minimum in index order)
               if U_m >= 1: m = the next replica in round robin
               else:        U_m += et / td
               send the event to m

The code's rule: a random choice among the active replicas with weights 101 - 100 * load_j, loads
refreshed every second.

Neither rule is wired into the simulator's network models: they have one queue per operator (ideal
balancing, as the live testbed's competing consumers), so a grouping has nothing to choose there.
`per_replica_study` runs one operator with a queue per replica to compare the rules.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, List, Sequence, Union

import numpy as np


@dataclass
class LoadBalancingGrouping:
    """Algorithm 2's state for one operator: U per active replica and the round-robin pointer."""

    et_s: float
    td_s: float
    u: List[float] = field(default_factory=list)
    rr: int = 0

    def reset(self, processed: Sequence[float]) -> None:
        """At an interval's end: U_j = mu_j * et / td from each replica's processed count."""
        self.u = [n * self.et_s / self.td_s for n in processed]

    def route(self) -> int:
        """The replica (index) of the next event."""
        m = min(range(len(self.u)), key=lambda j: (self.u[j], j))
        if self.u[m] >= 1.0:
            m = self.rr % len(self.u)
            self.rr = m + 1
        else:
            self.u[m] += self.et_s / self.td_s
        return m


def weighted_choice(loads: Union[Sequence[float], np.ndarray], rng: np.random.Generator, n: int) -> np.ndarray:
    """The code's PoolGrouping: n choices among the replicas with weights 101 - 100 * load."""
    w = 101.0 - 100.0 * np.clip(np.asarray(loads, dtype=float), 0.0, 1.0)
    return rng.choice(len(w), size=n, p=w / w.sum())


def per_replica_study(rates: Sequence[int], speeds: Sequence[float], et_s: float, rule: str, seed: int = 1,
                      td_s: float = 30.0) -> dict:
    """One operator whose replicas each have their own FIFO queue, in 1 s steps: replica j serves up
    to speeds[j] / et_s events per second; each second's events are routed by `rule` (shuffle:
    round robin over a seeded permutation per second, as Storm's shuffle grouping; alg2; weighted).
    Returns the mean queueing delay of the served events (s, events wait in whole seconds), the
    events still queued at the end and the per-replica served counts."""
    rng = np.random.default_rng(seed)
    r = len(speeds)
    capacity = [s / et_s for s in speeds]
    queues: List[List[List[float]]] = [[] for _ in range(r)]  # per replica: [arrival second, count] FIFO
    served = np.zeros(r)
    window = np.zeros(r)  # served in the current interval (alg2's mu) or second (weighted's load)
    credit = np.zeros(r)  # fractional capacity carried over
    alg2 = LoadBalancingGrouping(et_s, td_s, [0.0] * r)
    loads = np.zeros(r)
    wait_sum, done = 0.0, 0.0
    for t, n in enumerate(rates):
        if rule == "shuffle":
            targets = np.resize(rng.permutation(r), n)
        elif rule == "alg2":
            targets = np.array([alg2.route() for _ in range(n)], dtype=int)
        elif rule == "weighted":
            targets = weighted_choice(loads, rng, n)
        else:
            raise ValueError(f"rule: {rule!r} is none of shuffle, alg2, weighted")
        for j, k in enumerate(np.bincount(targets, minlength=r)):
            if k:
                queues[j].append([float(t), float(k)])
        busy = np.zeros(r)
        for j in range(r):
            credit[j] += capacity[j]
            while queues[j] and credit[j] >= 1.0:
                cohort = queues[j][0]
                k = min(cohort[1], float(int(credit[j])))
                wait_sum += k * (t - cohort[0])
                done += k
                served[j] += k
                window[j] += k
                busy[j] += k
                credit[j] -= k
                cohort[1] -= k
                if cohort[1] <= 0:
                    queues[j].pop(0)
            if not queues[j]:
                credit[j] = min(credit[j], 1.0)  # an idle replica banks no capacity
        loads = np.minimum(1.0, busy / np.asarray(capacity))  # refreshed every second
        if (t + 1) % int(td_s) == 0:
            alg2.reset(window.tolist())
            window[:] = 0.0
    left = sum(c[1] for q in queues for c in q)
    return {"rule": rule, "mean_wait_s": wait_sum / done if done else float("nan"), "queued_at_end": left,
            "served": served.tolist()}


RULES: Sequence[str] = ("shuffle", "alg2", "weighted")
Study = Callable[..., dict]
