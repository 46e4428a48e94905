"""Billing per started BTU: prices in docs/papers/btu-provisioning.md#evaluation-configuration,
resource cost in docs/papers/btu-provisioning.md#metrics. Pure functions, shared by simulator,
runtime and reports."""
from __future__ import annotations

import math

# A lease that ends within this many seconds after a BTU boundary is not charged another BTU:
# float arithmetic on simulated times must not turn 3600.0000001 s into two BTUs.
BILLING_EPSILON_S = 1e-6


def price_per_btu(btu_minutes: float, price_per_10_minutes: float = 1.0) -> float:
    """Linear price of one BTU: 1 per 10 minutes in the paper."""
    return btu_minutes / 10.0 * price_per_10_minutes


def paid_btus(start_s: float, end_s: float, btu_s: float) -> int:
    """BTUs paid for a lease from start_s to end_s: every started BTU counts, at least one."""
    if end_s < start_s:
        raise ValueError(f"lease ends before it starts: {start_s} > {end_s}")
    if btu_s <= 0:
        raise ValueError(f"BTU length must be positive, got {btu_s}")
    return max(1, math.ceil((end_s - start_s - BILLING_EPSILON_S) / btu_s))


def lease_cost(start_s: float, end_s: float, btu_minutes: float, price_per_10_minutes: float = 1.0) -> float:
    """Resource cost of one lease billed under a BTU of btu_minutes."""
    return paid_btus(start_s, end_s, btu_minutes * 60.0) * price_per_btu(btu_minutes, price_per_10_minutes)
