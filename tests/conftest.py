"""Shared test helpers: compose the project's real Hydra config with overrides."""
from __future__ import annotations

from typing import Callable

import pytest
from hydra import compose, initialize_config_dir

from testbed.config import CONF_DIR, ExperimentConfig, register, to_typed, validate


def compose_config(*overrides: str) -> ExperimentConfig:
    register()
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return validate(to_typed(compose("config", overrides=list(overrides))))


@pytest.fixture
def config() -> Callable[..., ExperimentConfig]:
    return compose_config
