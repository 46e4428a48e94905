"""What the profiles measured from a runs folder share (`testbed engine-profile`, `testbed
live-profile`): finding the complete runs of one backend, and the spread of a measured value as
their headers print it."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, List

import numpy as np

from testbed.eventlog import EventLogError, Manifest, find_runs, read_manifest


def complete_runs(root: Path, backend: str, also: Callable[[Manifest], bool] = lambda m: True) -> List[Path]:
    """The complete runs below root whose manifest names the backend (`docker`, `flink`) and that
    `also` accepts; folders without a readable manifest are passed over."""
    found = []
    for d in find_runs(root):
        try:
            m = read_manifest(d)
        except EventLogError:
            continue
        if m.status == "complete" and m.backend == backend and also(m):
            found.append(d)
    return found


def spread(values: np.ndarray, scale: float = 1.0, decimals: int = 1) -> str:
    """Median, p10-p90, range and count of the finite values (times scale), for a profile's header."""
    v = np.asarray(values, dtype=float) * scale
    v = v[np.isfinite(v)]
    if not v.size:
        return "none measured"
    p10, p90 = np.percentile(v, [10, 90])
    return (f"median {np.median(v):.{decimals}f}, p10-p90 {p10:.{decimals}f}-{p90:.{decimals}f}, "
            f"range {v.min():.{decimals}f}-{v.max():.{decimals}f} (n={v.size})")
