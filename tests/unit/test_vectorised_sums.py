"""The numpy forms of per-sample loops (issue 17: a run's speed) give exactly what the loops gave:
the event logs and the summary of a seed must not change by a bit."""
from __future__ import annotations

import math
from typing import List, Optional, Sequence

import numpy as np

from reporting.metrics import _episodes, _time_to_adapt
from testbed.config import Measurement, Sampling
from testbed.sim.recorder import SampleRecorder

OPERATORS = ["A", "B", "C"]


def _loop_means(operators: Sequence[str], ops: Sequence[int], durations: Sequence[float]) -> List[Optional[float]]:
    """Mean per operator, summed sample by sample in order (the recorder's former loop)."""
    sums, counts = [0.0] * len(operators), [0] * len(operators)
    for k, d in zip(ops, durations, strict=True):
        sums[k] += d
        counts[k] += 1
    return [s / n if n else None for s, n in zip(sums, counts, strict=True)]


def _loop_episodes(times: Sequence[float], compliant: Sequence[bool]) -> List[float]:
    """Violation episodes walked sample by sample (the summary's former loop)."""
    lengths: List[float] = []
    seen_compliant, start = False, None
    for t, ok in zip(times, compliant, strict=True):
        if ok:
            if start is not None:
                lengths.append(float(t - start))
                start = None
            seen_compliant = True
        elif seen_compliant and start is None:
            start = float(t)
    return lengths


def test_interval_means_are_the_sequential_sums_bit_for_bit():
    rng = np.random.default_rng(17)
    rec = SampleRecorder(OPERATORS, [0.5] * 3, 10, Sampling.every_nth, Measurement.milliseconds, seed=1)
    every_op: List[int] = []
    for _ in range(3):  # intervals of several hand-overs each, one operator left without samples
        ops, durations = [], []
        for _ in range(4):
            op = rng.choice([0, 2], size=int(rng.integers(0, 400)))
            d = rng.gamma(2.0, 300.0, size=len(op)) * 10.0 ** rng.integers(-3, 4, size=len(op))
            rec.extend(list(np.arange(len(op), dtype=float)), op.astype(np.int64), ["i"] * len(op), d.tolist())
            ops += op.tolist()
            durations += d.tolist()
        every_op += ops
        means = rec.interval_means()
        assert means == _loop_means(OPERATORS, ops, durations)
        assert means[1] is None
    assert rec.operator == [OPERATORS[k] for k in every_op]  # the samples table's names


def test_episodes_skip_leading_and_open_violations():
    t = np.arange(10, dtype=float) * 1.5
    ok = np.array([0, 0, 1, 0, 0, 1, 1, 0, 1, 0], dtype=bool)  # leading run, two episodes, an open one
    assert _episodes(t, ok) == [3.0, 1.5] == _loop_episodes(t, ok)  # 4.5 -> 7.5 and 10.5 -> 12
    assert _episodes(t, np.zeros(10, dtype=bool)) == []
    assert _episodes(t, np.ones(10, dtype=bool)) == []
    assert _episodes(t[:0], ok[:0]) == []


def test_episodes_and_time_to_adapt_as_the_loop_gave():
    import pandas as pd

    rng = np.random.default_rng(3)
    for n in (1, 2, 50, 5000):
        t = np.sort(rng.uniform(0, 7200, n))
        ok = rng.random(n) < rng.uniform(0.2, 0.9)
        assert _episodes(t, ok) == _loop_episodes(t, ok)
    n = 20000  # samples of three operators interleaved, some at equal times (a stable sort keeps their order)
    samples = pd.DataFrame({"t_s": np.round(rng.uniform(0, 600, n), 1), "operator": rng.choice(["B", "A", "C"], n),
                            "duration_ms": rng.gamma(2.0, 400.0, n)})
    slo = {"A": 700.0, "B": 900.0, "C": 500.0}
    lengths: List[float] = []
    for op in sorted(slo):
        own = samples[samples["operator"] == op].sort_values("t_s", kind="mergesort")
        lengths += _loop_episodes(own["t_s"].to_numpy(), own["duration_ms"].to_numpy() <= slo[op])
    expected = float(np.mean(lengths))
    got = _time_to_adapt(samples, slo)
    assert got == expected or (math.isnan(got) and math.isnan(expected))
