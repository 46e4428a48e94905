"""Recovery-time prediction (docs/papers/daedalus.md#recovery-time-prediction): how long a job at
capacity C needs after a rescale to work off the replay since the last checkpoint and the arrivals
during the downtime, given the workload forecast."""
from __future__ import annotations

from enum import Enum
from typing import Sequence, Union

import numpy as np

INVALID_S = 3600


class RtSemantics(str, Enum):
    paper = "paper"  # RT = D + j + 1
    code = "code"  # RT = j + 2D (the code's formula without its clock offset)


def predict_recovery_time(capacity: float, forecast: Union[Sequence[float], np.ndarray], replay: float, downtime_s: int,
                          lag: float = 0.0, semantics: RtSemantics = RtSemantics.paper) -> int:
    """RT of one candidate.

    B = replay (Σ workload over the last K s) + Σ F[0:D] + lag (pass 0 unless backlog_includes_lag);
    extra_k = max(C − F[D + k], 0); j = the first k whose running sum of extra exceeds B.
    Paper: RT = D + j + 1; code: RT = j + 2D. No such j within the forecast: 3600 + D (invalid)."""
    d = int(downtime_s)
    f = np.asarray(forecast, dtype=float)
    backlog = float(replay) + float(f[:d].sum()) + float(lag)
    extra = np.maximum(capacity - f[d:], 0.0)
    if extra.size:
        over = np.nonzero(np.cumsum(extra) > backlog)[0]
        if over.size:
            j = int(over[0])
            return d + j + 1 if RtSemantics(semantics) is RtSemantics.paper else j + 2 * d
    return INVALID_S + d
