"""The ILP of spec §5–§6 as a solver-agnostic description: columns, CSR rows, objective.

`build_model` is a pure function of the instance and two form options; the solver adapters only
translate the description. Column layout: x per operator over its candidates, then y per edge over
candidate pairs (row-major: source candidate, target candidate), then r, then the potentials t
(edge-wise form only).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Callable, Iterable, List, Optional, Tuple

import numpy as np
from numpy.typing import ArrayLike

from testbed.placement.odp.indexed import Indexed
from testbed.placement.odp.metrics import Bounds, bounds, span

INF = np.inf
ColumnRange = Callable[[int], np.ndarray]  # the columns of operator i's x (or edge k's y)


class ObjectiveForm(str, Enum):
    NORMALISED = "normalised"  # maximise F' (9)/(22): the default, solvers stop on a relative gap of F'
    RAW_R = "raw_r"  # minimise r directly (only for w_r = 1)


class ResponseTimeForm(str, Enum):
    PATHS = "paths"  # one constraint (10) per source→sink path, as in the paper
    POTENTIALS = "potentials"  # edge-wise longest path: t_j ≥ t_i + exec_j + delay_ij
    AUTO = "auto"  # paths unless there are more than `max_paths`


@dataclass(frozen=True)
class Layout:
    candidates: Tuple[np.ndarray, ...]
    x_start: np.ndarray  # (n + 1,) column of operator i's first x; x_start[n] = |x|
    y_start: np.ndarray  # (|E| + 1,) offsets from the first y column
    r: int  # the column of r
    t_start: Optional[int]  # first potential column, or None

    @property
    def nx(self) -> int:
        return int(self.x_start[-1])

    @property
    def ny(self) -> int:
        return int(self.y_start[-1])

    def y_col(self, edge: int) -> int:
        return self.nx + int(self.y_start[edge])


@dataclass(frozen=True)
class LinearModel:
    maximise: bool
    offset: float  # constant term of the objective
    cost: np.ndarray
    col_lower: np.ndarray
    col_upper: np.ndarray
    integer: np.ndarray  # bool per column
    row_lower: np.ndarray
    row_upper: np.ndarray
    row_start: np.ndarray  # CSR
    col_index: np.ndarray
    value: np.ndarray
    families: Tuple[Tuple[str, int], ...]  # constraint families in row order, with their row counts
    layout: Layout
    bounds: Bounds
    rt_form: ResponseTimeForm  # the form used (never AUTO)
    objective_form: ObjectiveForm
    n_paths: int

    @property
    def num_cols(self) -> int:
        return len(self.cost)

    @property
    def num_rows(self) -> int:
        return len(self.row_lower)

    @property
    def nnz(self) -> int:
        return len(self.value)


class _Rows:
    """Collects constraint rows family by family as COO triplets."""

    def __init__(self) -> None:
        self.rows: List[np.ndarray] = []
        self.cols: List[np.ndarray] = []
        self.vals: List[np.ndarray] = []
        self.lower: List[np.ndarray] = []
        self.upper: List[np.ndarray] = []
        self.families: List[Tuple[str, int]] = []
        self.count = 0

    def add_family(self, name: str, n_rows: int, rows: ArrayLike, cols: ArrayLike, vals: ArrayLike,
                   lower: ArrayLike, upper: ArrayLike) -> None:
        rows = np.asarray(rows, dtype=np.int64)
        vals = np.asarray(vals, dtype=float)
        keep = vals != 0.0  # zero delays on self-loops, zero demands
        self.rows.append(rows[keep] + self.count)
        self.cols.append(np.asarray(cols, dtype=np.int64)[keep])
        self.vals.append(vals[keep])
        self.lower.append(np.broadcast_to(np.asarray(lower, dtype=float), (n_rows,)))
        self.upper.append(np.broadcast_to(np.asarray(upper, dtype=float), (n_rows,)))
        self.families.append((name, n_rows))
        self.count += n_rows

    def csr(self) -> Tuple[np.ndarray, ...]:
        rows = np.concatenate(self.rows) if self.rows else np.zeros(0, dtype=np.int64)
        cols = np.concatenate(self.cols) if self.cols else np.zeros(0, dtype=np.int64)
        vals = np.concatenate(self.vals) if self.vals else np.zeros(0)
        order = np.lexsort((cols, rows))
        start = np.zeros(self.count + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=self.count), out=start[1:])
        lower = np.concatenate(self.lower) if self.lower else np.zeros(0)
        upper = np.concatenate(self.upper) if self.upper else np.zeros(0)
        return lower, upper, start, cols[order], vals[order]


class _Columns:
    """Column ranges of the x and y variables, and per-edge values over candidate pairs."""

    def __init__(self, ix: Indexed, x_start: np.ndarray, y_start: np.ndarray) -> None:
        self.ix, self.x_start, self.y_start = ix, x_start, y_start
        self.nx = int(x_start[-1])

    def x_cols(self, i: int) -> np.ndarray:
        return np.arange(self.x_start[i], self.x_start[i + 1])

    def y_cols(self, k: int) -> np.ndarray:
        return self.nx + np.arange(self.y_start[k], self.y_start[k + 1])

    def pair_values(self, k: int, matrix: np.ndarray) -> np.ndarray:
        i, j = self.ix.dag.arcs[k]
        return matrix[np.ix_(self.ix.candidates[i], self.ix.candidates[j])].ravel()


def build_model(
    ix: Indexed,
    objective_form: ObjectiveForm = ObjectiveForm.NORMALISED,
    rt_form: ResponseTimeForm = ResponseTimeForm.AUTO,
    max_paths: int = 10_000,
) -> LinearModel:
    cand = ix.candidates
    arcs = ix.dag.arcs
    sizes = np.array([len(c) for c in cand], dtype=np.int64)
    x_start = np.concatenate(([0], np.cumsum(sizes)))
    pair_sizes = np.array([sizes[i] * sizes[j] for i, j in arcs], dtype=np.int64)
    y_start = np.concatenate(([0], np.cumsum(pair_sizes)))
    nx, ny = int(x_start[-1]), int(y_start[-1])
    n_paths = ix.dag.count_paths()
    if rt_form is ResponseTimeForm.AUTO:
        rt_form = ResponseTimeForm.PATHS if n_paths <= max_paths else ResponseTimeForm.POTENTIALS
    r_col = nx + ny
    t_start = r_col + 1 if rt_form is ResponseTimeForm.POTENTIALS else None
    num_cols = r_col + 1 + (ix.n if t_start is not None else 0)
    layout = Layout(cand, x_start, y_start, r_col, t_start)
    c = _Columns(ix, x_start, y_start)

    rows = _Rows()
    _response_time_rows(rows, ix, rt_form, c.x_cols, c.y_cols, c.pair_values, r_col, t_start)
    _capacity_rows(rows, ix, c.x_cols)
    # (12) every operator on exactly one candidate
    rows.add_family("assignment", ix.n, np.repeat(np.arange(ix.n), sizes), np.arange(nx), np.ones(nx), 1.0, 1.0)
    _and_rows(rows, ix, c.x_cols, c.y_cols)
    _bandwidth_rows(rows, ix, c.y_cols)

    b = bounds(ix)
    cost, offset = _objective(ix, c, b, objective_form, num_cols, r_col)
    lower, upper, start, cols, vals = rows.csr()
    integer = np.zeros(num_cols, dtype=bool)
    integer[: nx + ny] = True
    col_upper = np.full(num_cols, INF)
    col_upper[: nx + ny] = 1.0
    return LinearModel(
        maximise=objective_form is ObjectiveForm.NORMALISED, offset=offset, cost=cost,
        col_lower=np.zeros(num_cols), col_upper=col_upper, integer=integer,
        row_lower=lower, row_upper=upper, row_start=start, col_index=cols, value=vals,
        families=tuple(rows.families), layout=layout, bounds=b, rt_form=rt_form,
        objective_form=objective_form, n_paths=n_paths,
    )


def _objective(ix: Indexed, c: _Columns, b: Bounds, form: ObjectiveForm, num_cols: int,
               r_col: int) -> Tuple[np.ndarray, float]:
    """The cost vector and constant offset: r alone, or F' with each term normalised by its span."""
    w = ix.instance.weights
    cost = np.zeros(num_cols)
    offset = 0.0
    if form is ObjectiveForm.RAW_R:
        if w.r != 1.0:
            raise ValueError("objective_form raw_r minimises r alone: it needs weights r = 1, a = z = 0")
        cost[r_col] = 1.0
        return cost, offset
    arcs = range(len(ix.dag.arcs))
    width = span(b.r_min, b.r_max)
    if w.r > 0 and width:
        cost[r_col] = -w.r / width
        offset += w.r * b.r_max / width
    width = span(b.log_a_min, b.log_a_max)
    if w.a > 0 and width:
        for i in range(ix.n):
            cost[c.x_cols(i)] += w.a * ix.log_a_node[ix.candidates[i]] / width
        for k in arcs:
            cost[c.y_cols(k)] += w.a * c.pair_values(k, ix.log_a_link) / width
        offset -= w.a * b.log_a_min / width
    width = span(b.z_min, b.z_max)
    if w.z > 0 and width:
        assert ix.instance.network_objective is not None  # validated: weights.z > 0 needs one
        weight = ix.network_weight(ix.instance.network_objective)
        for k in arcs:
            cost[c.y_cols(k)] -= w.z * ix.rates[k] * c.pair_values(k, weight) / width
        offset += w.z * b.z_max / width
    return cost, offset


def _response_time_rows(rows: _Rows, ix: Indexed, form: ResponseTimeForm, x_cols: ColumnRange, y_cols: ColumnRange,
                        pair_values: Callable[[int, np.ndarray], np.ndarray], r_col: int,
                        t_start: Optional[int]) -> None:
    cand = ix.candidates

    def exec_terms(i: int) -> Tuple[np.ndarray, np.ndarray]:
        return x_cols(i), -ix.exec_ms[i, cand[i]]

    def delay_terms(k: int) -> Tuple[np.ndarray, np.ndarray]:
        return y_cols(k), -pair_values(k, ix.delay)

    r_list, c_list, v_list = [], [], []

    def row(index: int, terms: Iterable[Tuple[ArrayLike, ArrayLike]]) -> None:
        for cols, vals in terms:
            c = np.asarray(cols)
            r_list.append(np.full(len(c), index))
            c_list.append(c)
            v_list.append(np.asarray(vals, dtype=float))

    if form is ResponseTimeForm.PATHS:
        # (10): r ≥ Σ exec + Σ delay along each source→sink path
        paths = ix.dag.paths()
        for p, (ops, path_arcs) in enumerate(paths):
            row(p, [([r_col], [1.0])] + [exec_terms(i) for i in ops] + [delay_terms(k) for k in path_arcs])
        rows.add_family("response_time", len(paths), _cat(r_list), _cat(c_list), _cat(v_list), 0.0, INF)
        return
    # potentials: t_s ≥ exec_s (sources), t_j ≥ t_i + exec_j + delay_ij (edges), r ≥ t_sink (sinks)
    assert t_start is not None  # the potentials' columns exist in this form
    dag = ix.dag
    count = 0
    for s in dag.sources:
        row(count, [([t_start + s], [1.0]), exec_terms(s)])
        count += 1
    for k, (i, j) in enumerate(dag.arcs):
        row(count, [([t_start + j, t_start + i], [1.0, -1.0]), exec_terms(j), delay_terms(k)])
        count += 1
    for s in dag.sinks:
        row(count, [([r_col, t_start + s], [1.0, -1.0])])
        count += 1
    rows.add_family("response_time", count, _cat(r_list), _cat(c_list), _cat(v_list), 0.0, INF)


def _capacity_rows(rows: _Rows, ix: Indexed, x_cols: ColumnRange) -> None:
    # (11) per node and resource kind: Σ_i C_i x_iu ≤ C_u; row index u * kinds + kind
    kinds = ix.capacity.shape[1]
    r_list, c_list, v_list = [], [], []
    for i, nodes in enumerate(ix.candidates):
        for kind in range(kinds):
            r_list.append(nodes * kinds + kind)
            c_list.append(x_cols(i))
            v_list.append(np.full(len(nodes), ix.demand[i, kind]))
    rows.add_family("capacity", ix.m * kinds, _cat(r_list), _cat(c_list), _cat(v_list), -INF, ix.capacity.ravel())


def _and_rows(rows: _Rows, ix: Indexed, x_cols: ColumnRange, y_cols: ColumnRange) -> None:
    # (13) x_iu = Σ_v y_(ij),(uv) and (14) x_jv = Σ_u y_(ij),(uv): y is the AND of two x
    cand = ix.candidates
    for name, source_side in (("and_source", True), ("and_target", False)):
        r_list, c_list, v_list = [], [], []
        count = 0
        for k, (i, j) in enumerate(ix.dag.arcs):
            a, b = len(cand[i]), len(cand[j])
            side = a if source_side else b
            local = np.arange(side) + count
            r_list.append(local)
            c_list.append(x_cols(i if source_side else j))
            v_list.append(np.ones(side))
            grid = np.arange(a * b)
            r_list.append(count + (grid // b if source_side else grid % b))
            c_list.append(y_cols(k))
            v_list.append(-np.ones(a * b))
            count += side
        rows.add_family(name, count, _cat(r_list), _cat(c_list), _cat(v_list), 0.0, 0.0)


def _bandwidth_rows(rows: _Rows, ix: Indexed, y_cols: ColumnRange) -> None:
    # (17) per link u ≠ v with a finite B: Σ_(i,j) λ_ij y_(ij),(uv) ≤ B_uv (only links some y can load)
    cand = ix.candidates
    m = ix.m
    link_rows: dict = {}
    r_list, c_list, v_list = [], [], []
    for k, (i, j) in enumerate(ix.dag.arcs):
        if ix.rates[k] == 0:
            continue
        us, vs = np.meshgrid(cand[i], cand[j], indexing="ij")
        us, vs = us.ravel(), vs.ravel()
        limited = (us != vs) & np.isfinite(ix.bandwidth[us, vs])
        if not limited.any():
            continue
        links = us[limited] * m + vs[limited]
        for link in links:
            link_rows.setdefault(int(link), len(link_rows))
        r_list.append(np.array([link_rows[int(link)] for link in links], dtype=np.int64))
        c_list.append(y_cols(k)[limited])
        v_list.append(np.full(int(limited.sum()), ix.rates[k]))
    order = sorted(link_rows, key=link_rows.__getitem__)
    upper = np.array([ix.bandwidth[link // m, link % m] for link in order], dtype=float)
    rows.add_family("bandwidth", len(order), _cat(r_list), _cat(c_list), _cat(v_list), -INF, upper)


def _cat(parts: List[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0)
