"""`to_plain` (manifests, settings and sweep digests) builds what OmegaConf's conversion of the
structured config gives, for every evaluation's resolved run configs."""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from testbed.config import CONF_DIR, to_plain
from testbed.experiment import config_for, plan_runs
from tests.conftest import compose_config

EVALUATIONS = sorted(p.stem for p in (CONF_DIR / "evaluation").glob("*.yaml"))


@pytest.mark.parametrize("evaluation", EVALUATIONS)
@pytest.mark.slow
def test_to_plain_equals_omegaconf_conversion(evaluation):
    cfg = compose_config(f"evaluation={evaluation}")
    for c in [cfg, *(config_for(cfg, s) for s in plan_runs(cfg) if s.rep == 1)]:
        assert to_plain(c) == OmegaConf.to_container(OmegaConf.structured(c), enum_to_str=True)
