"""Shared test helpers: compose the project's real Hydra config with overrides."""
from __future__ import annotations

import copy
import os
import re
import time
from typing import Callable, Dict, Tuple

import pytest
from hydra import compose, initialize_config_dir

from testbed.backend_registry import backends
from testbed.config import CONF_DIR, ExperimentConfig, register, to_typed, validate
from testbed.placement.base import placements
from testbed.policies.registry import policies as registered_policies
from testbed.workloads.registry import workload_kinds

# the environment variables the config files read (`${oc.env:NAME,...}`)
CONFIG_ENV = tuple(sorted({m for f in CONF_DIR.rglob("*.yaml")
                           for m in re.findall(r"oc\.env:(\w+)", f.read_text(encoding="utf-8"))}))
_composed: Dict[Tuple, ExperimentConfig] = {}


def _inputs(overrides: Tuple[str, ...]) -> Tuple:
    """Everything a composed config depends on besides the config files: the overrides, the
    registered policies, workload kinds, placements and backends (tests register their own), the environment."""
    def names(registry) -> Tuple:
        return tuple(sorted((name, id(value)) for name, value in registry.items()))

    return (overrides, names(registered_policies()), names(workload_kinds()), names(placements()),
            names(backends()), tuple(os.environ.get(v) for v in CONFIG_ENV))


def compose_config(*overrides: str) -> ExperimentConfig:
    """The project's config with these overrides, validated. Composed once per process for the same
    inputs (a Hydra compose takes a third of a second, and the unit tests compose hundreds); each
    caller gets its own copy to change."""
    register()
    key = _inputs(overrides)
    if key not in _composed:
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            _composed[key] = validate(to_typed(compose("config", overrides=list(overrides))))
    return copy.deepcopy(_composed[key])


@pytest.fixture
def config() -> Callable[..., ExperimentConfig]:
    return compose_config


# The integration tests run in two lanes for pytest-xdist (`make test -n ...`), each one unit of work in
# collection order on one worker, while the other workers take the rest:
# * "services": the machine's one RabbitMQ, Redis and Docker engine (its tests restart them, hog a core
#   and time live runs). Its live Docker runs come last: by then the other workers have finished, and
#   the runs' service times and drains see only the load the tests themselves make (and CI's hog).
# * "engines": what needs neither the machine's broker nor its Redis: Flink (one cluster at a time),
#   Spark, the compose stack (its own broker and Redis on free ports) and the Kafka-protocol provider.
SERVICE_TESTS = "tests/integration/"
ENGINE_TESTS = tuple(f"tests/integration/{name}" for name in (
    "test_flink_", "test_sweep_spark.py", "test_compose.py", "test_provider_kafka.py"))


def _live_docker_run(item) -> bool:
    return item.path.name.startswith("test_live_") and item.get_closest_marker("live") is not None


def pytest_collection_modifyitems(config, items) -> None:
    items[:] = sorted(items, key=_live_docker_run)  # stable: the order within each part is kept


def lane(nodeid: str) -> str:
    """The unit of work a test belongs to: a service lane, or itself."""
    if nodeid.startswith(ENGINE_TESTS):
        return "engines"
    return "services" if nodeid.startswith(SERVICE_TESTS) else nodeid


@pytest.hookimpl(optionalhook=True)  # known only when pytest-xdist is loaded (not under -p no:xdist)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ServicesApart(LoadScopeScheduling):
        """Each service lane one scope (one worker, collection order); every other test its own."""

        def _split_scope(self, nodeid: str) -> str:
            return lane(nodeid)

    return ServicesApart(config, log)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With TESTBED_TEST_TIMELINE set, each test's worker, start and end (set-up to tear-down) go to
    that file, one line each: CI prints every lane's span from it (`python -m tests.timeline`)."""
    path = os.environ.get("TESTBED_TEST_TIMELINE")
    start = time.time()
    yield
    if path:
        line = f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}\t{start:.2f}\t{time.time():.2f}\t{item.nodeid}\n"
        with open(path, "a", encoding="utf-8") as f:  # one short append per line: workers do not interleave
            f.write(line)
