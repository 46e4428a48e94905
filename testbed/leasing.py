"""Host bookkeeping shared by the simulated cluster (testbed/sim) and the live host pool
(testbed/live): a lease's BTU accounting (lease, prolong, release), the image cache with its pull
delay, the reservations that make a HostView, and the event log's `leases` table. Pure: no clock,
no I/O; callers pass the time."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional

from testbed.billing import paid_btus
from testbed.model import HostView, OperatorType

LEASE_COLUMNS = ("host", "start_s", "end_s", "btu_s", "paid_btus", "prolongations", "released")


@dataclass
class Host:
    """One leased VM: its capacity, paid time, image cache and the instances placed on it."""

    id: str
    cpu: int
    memory: int
    leased_at: float
    ready_at: float  # booted
    btu_end: float  # end of the paid time
    images: Dict[str, float] = field(default_factory=dict)  # operator -> when its image is there
    instances: List[str] = field(default_factory=list)
    releasing: bool = False
    released_at: Optional[float] = None
    prolongations: int = 0

    def prolong(self, btu_s: float) -> None:
        """Pay one more BTU in advance."""
        self.btu_end += btu_s
        self.prolongations += 1

    def image_ready(self, operator: str, begin: float, pull_s: float) -> float:
        """When `operator`'s image is on this host for a start beginning at `begin`; the first start
        of a type pulls it (pull_s) and every later start waits for that same pull."""
        if operator not in self.images:
            self.images[operator] = begin + pull_s
        return max(begin, self.images[operator])

    def release(self, t: float) -> bool:
        """End the lease at t (once). Returns whether this call released it."""
        if self.released_at is not None:
            return False
        self.released_at = t
        return True

    def view(self, t: float, reserved: Iterable[OperatorType], price: float) -> HostView:
        """The policy's view; `reserved` = the types of the instances that still hold a reservation."""
        types = list(reserved)
        return HostView(
            id=self.id, cpu=self.cpu, memory=self.memory,
            cpu_free=self.cpu - sum(o.cpu for o in types),
            memory_free=self.memory - sum(o.memory for o in types),
            leased_at=self.leased_at, btu_end=self.btu_end, images=frozenset(self.images),
            ready=self.ready_at <= t, cost=price, releasing=self.releasing,
        )


def leases_table(hosts: Iterable[Host], btu_s: float, end_s: float) -> Dict[str, list]:
    """The `leases` table (testbed/eventlog.py), one row per lease ordered by lease time. A lease
    still open at the run's end (end_s) pays at least the BTUs already paid in advance by prolongs."""
    cols: Dict[str, list] = {k: [] for k in LEASE_COLUMNS}
    for h in sorted(hosts, key=lambda h: (h.leased_at, h.id)):
        end = h.released_at if h.released_at is not None else end_s
        paid = paid_btus(h.leased_at, end, btu_s)
        if h.released_at is None:
            paid = max(paid, 1 + h.prolongations)
        row: Mapping[str, object] = {
            "host": h.id, "start_s": h.leased_at, "end_s": end, "btu_s": btu_s, "paid_btus": paid,
            "prolongations": h.prolongations, "released": h.released_at is not None,
        }
        for k in LEASE_COLUMNS:
            cols[k].append(row[k])
    return cols
