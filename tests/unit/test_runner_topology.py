"""The runner's built-in default topology is the one of the experiment config."""
from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from operators.topology import oee_topology

OEE_YAML = Path(__file__).resolve().parents[2] / "experiments" / "conf" / "topology" / "oee.yaml"


def test_default_topology_matches_the_oee_config():
    conf = OmegaConf.to_container(OmegaConf.load(OEE_YAML))
    want = {
        "sources": {name: list(src.get("downstream", [])) for name, src in conf["sources"].items()},
        "operators": {name: list(op.get("downstream", [])) for name, op in conf["operators"].items()},
    }
    assert oee_topology() == want


def test_default_topology_is_a_copy():
    t = oee_topology()
    t["operators"]["O1"].append("O9")
    assert oee_topology()["operators"]["O1"] == ["O3", "O4", "O5"]
