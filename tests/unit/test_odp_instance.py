"""ODP instances: the JSON form, its one-line errors naming the field, and the validation."""
from __future__ import annotations

import copy
import json

import pytest

from testbed.odp_study.generator import Table2, Topology, table2_instance
from testbed.placement.odp import InstanceError, NetworkObjective, instance_from_dict, instance_to_dict

SMALL = {
    "operators": [
        {"id": "src", "C": 1, "R": 0, "candidates": ["a"]},
        {"id": "op", "C": [1], "R": 10.0},
        {"id": "snk", "C": 1, "R": 0, "candidates": ["b"]},
    ],
    "edges": [{"from": "src", "to": "op", "rate": 5}, {"from": "op", "to": "snk"}],
    "nodes": [{"id": "a", "C": 2, "S": 1, "A": 0.99}, {"id": "b", "C": 2, "S": 2, "A": 1}],
    "links": [{"from": "a", "to": "b", "d": 12.5, "B": 100}],
    "weights": {"r": 0.5, "a": 0.25, "z": 0.25},
    "network_objective": "elastic_energy",
}


def test_parses_the_json_form_and_fills_the_reverse_link():
    inst = instance_from_dict(SMALL)
    assert inst.operator_ids == ("src", "op", "snk")
    assert inst.operators[0].candidates == ("a",)
    assert inst.operators[1].candidates is None and inst.candidates_of(inst.operators[1]) == ("a", "b")
    assert inst.edges[1].rate == 0.0
    assert inst.network_objective is NetworkObjective.ELASTIC_ENERGY
    from testbed.placement.odp.indexed import index
    ix = index(inst)
    assert ix.delay[0, 1] == ix.delay[1, 0] == 12.5  # one direction given: it holds for both
    assert ix.delay[0, 0] == 0 and ix.log_a_link[1, 1] == 0  # self-loops are perfect


def test_round_trips_through_json():
    inst = table2_instance(Table2(5, 4, Topology.FAT, candidate_fraction=0.5, seed=3))
    again = instance_from_dict(json.loads(json.dumps(instance_to_dict(inst))))
    assert again == inst


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d.pop("nodes"), "nodes"),
    (lambda d: d["operators"][1].pop("R"), "operators[1].R"),
    (lambda d: d["operators"][1].update(R="fast"), "operators[1].R"),
    (lambda d: d["operators"][1].update(Cpu=1), "operators[1].Cpu"),
    (lambda d: d["operators"][0].update(candidates=["z"]), "operators[0].candidates"),
    (lambda d: d["operators"][2].update(id="src"), "operators[2].id"),
    (lambda d: d["operators"][1].update(C=[1, 2]), "operators[1].C"),
    (lambda d: d["edges"][0].update(to="nowhere"), "edges[0].to"),
    (lambda d: d["edges"].append({"from": "snk", "to": "src"}), "edges"),
    (lambda d: d["nodes"][0].update(A=0), "nodes[0].A"),
    (lambda d: d["nodes"][1].update(S=-1), "nodes[1].S"),
    (lambda d: d["links"][0].update(d=-3), "links[0].d"),
    (lambda d: d["links"].clear(), "links"),
    (lambda d: d["weights"].update(r=0.9), "weights"),
    (lambda d: d.pop("network_objective"), "network_objective"),
    (lambda d: d.update(network_objective="latency"), "network_objective"),
])
def test_a_malformed_instance_names_the_field(mutate, field):
    data = copy.deepcopy(SMALL)
    mutate(data)
    with pytest.raises(InstanceError) as err:
        instance_from_dict(data)
    assert err.value.field == field
    assert str(err.value).startswith(field + ": ") and "\n" not in str(err.value)
