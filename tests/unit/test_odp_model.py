"""The ILP's size (spec §9.3's formulas) and structure, built without solving."""
from __future__ import annotations

import numpy as np
import pytest

from testbed.odp_study.generator import Table2, Topology, table2_instance
from testbed.placement.odp import ResponseTimeForm, build_model
from testbed.placement.odp.indexed import index


def model_of(n, m, topology, **kw):
    return build_model(index(table2_instance(Table2(n, m, topology, **kw))))


def edges(topology, n):
    return n - 1 if topology is Topology.SEQUENTIAL else 2 * n - 4


@pytest.mark.parametrize("n, m, topology, ny", [
    (50, 20, Topology.SEQUENTIAL, 19_600), (50, 20, Topology.FAT, 38_400),  # Fig. 9a's largest
    (20, 100, Topology.SEQUENTIAL, 190_000), (20, 100, Topology.FAT, 360_000),  # Fig. 9b's largest
    (7, 5, Topology.SEQUENTIAL, 6 * 25), (7, 5, Topology.FAT, 10 * 25),
])
def test_variable_counts_match_the_published_formulas(n, m, topology, ny):
    model = model_of(n, m, topology)
    layout = model.layout
    assert layout.nx == n * m  # |x| = n·m
    assert layout.ny == edges(topology, n) * m * m == ny  # |y| = |E|·m²
    assert model.num_cols == n * m + ny + 1  # + r
    families = dict(model.families)
    assert families["response_time"] == (1 if topology is Topology.SEQUENTIAL else n - 2)  # one row per path
    assert model.n_paths == families["response_time"]
    assert families["capacity"] == m and families["assignment"] == n
    assert families["and_source"] == families["and_target"] == edges(topology, n) * m
    assert families["bandwidth"] == 0


def test_sc2_has_2_38_times_the_y_of_sc1_on_average():
    ratios = [model_of(20, 50, t).layout.ny / model_of(50, 20, t).layout.ny for t in Topology]
    assert [round(r, 2) for r in ratios] == [2.42, 2.34]
    assert round(float(np.mean(ratios)), 2) == 2.38


def test_candidate_sets_shrink_the_model():
    inst = table2_instance(Table2(6, 10, Topology.FAT, candidate_fraction=0.3, seed=4))
    ix = index(inst)
    sizes = [len(c) for c in ix.candidates]
    assert sizes == [3] * 6
    model = build_model(ix)
    assert model.layout.nx == sum(sizes)
    assert model.layout.ny == sum(sizes[i] * sizes[j] for i, j in ix.dag.arcs)


def test_the_potentials_form_has_one_row_per_source_edge_and_sink():
    model = build_model(index(table2_instance(Table2(8, 4, Topology.FAT))), rt_form=ResponseTimeForm.POTENTIALS)
    assert dict(model.families)["response_time"] == 1 + 12 + 1
    assert model.num_cols == 8 * 4 + 12 * 16 + 1 + 8  # x, y, r, one potential per operator
    auto = build_model(index(table2_instance(Table2(8, 4, Topology.FAT))), max_paths=5)
    assert auto.rt_form is ResponseTimeForm.POTENTIALS  # six paths exceed max_paths


def test_rows_are_well_formed():
    model = model_of(6, 4, Topology.FAT)
    assert model.row_start[-1] == model.nnz and np.all(np.diff(model.row_start) >= 0)
    assert model.col_index.max() < model.num_cols
    assert np.all(model.row_lower <= model.row_upper)
    # each y appears in exactly one (13) row and one (14) row, with coefficient -1
    layout = model.layout
    ys = (model.col_index >= layout.nx) & (model.col_index < layout.nx + layout.ny)
    rows = np.repeat(np.arange(model.num_rows), np.diff(model.row_start))
    fam = np.concatenate([[name] * count for name, count in model.families])
    for name in ("and_source", "and_target"):
        sel = ys & (fam[rows] == name)
        assert np.bincount(model.col_index[sel] - layout.nx, minlength=layout.ny).tolist() == [1] * layout.ny
        assert np.all(model.value[sel] == -1)
