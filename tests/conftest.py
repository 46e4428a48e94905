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


# The tests that use the machine's services (tests/integration: one RabbitMQ, Redis, Docker engine and
# Flink at a time; they restart them, hog a core and time real runs) are one unit of work for pytest-xdist:
# they run one after the other on one worker while the other workers take the rest (`make test -n ...`).
# Their live Docker runs come last: by then the other workers have finished, and the runs' service times
# and drains see only the load the tests themselves make (and CI's hog).
SERVICE_TESTS = "tests/integration/"


def _live_docker_run(item) -> bool:
    return item.path.name.startswith("test_live_") and item.get_closest_marker("live") is not None


def pytest_collection_modifyitems(config, items) -> None:
    items[:] = sorted(items, key=_live_docker_run)  # stable: the order within each part is kept


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ServicesApart(LoadScopeScheduling):
        """Every service test in one scope (one worker, collection order); every other test its own."""

        def _split_scope(self, nodeid: str) -> str:
            return "services" if nodeid.startswith(SERVICE_TESTS) else nodeid

    return ServicesApart(config, log)
