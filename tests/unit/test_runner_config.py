"""The runner's environment configuration: defaults, and errors that name the variable."""
from __future__ import annotations

import json

import pytest

from operators.runner_config import ConfigError, config_from_env
from operators.topology import oee_topology

BASE = {"OPERATOR": "O3", "RUN_PREFIX": "run-1"}


def test_defaults():
    cfg = config_from_env(BASE)
    assert (cfg.transport, cfg.prefetch, cfg.parallel, cfg.sample_every, cfg.measurement, cfg.work_ms) == \
        ("rabbitmq", 5, 1, 10, "milliseconds", 0.0)
    assert cfg.amqp_url == "amqp://guest:guest@127.0.0.1:5672/%2F" and cfg.redis_url == "redis://127.0.0.1:6379/0"
    assert cfg.kafka_bootstrap == "127.0.0.1:9092" and cfg.activation_poll_s == 0.5
    assert cfg.topology == oee_topology() and cfg.params == {}
    assert cfg.impl == "O3" and cfg.instance.startswith("O3-")
    [edge] = cfg.wiring().inputs("O3")
    assert edge.queue == "run-1.O1.O3" and edge.dead_letter_queue == "run-1.O1.O3.dead"


def test_everything_set():
    topology = {"sources": {"S": ["A"]}, "operators": {"A": []}}
    cfg = config_from_env({
        "OPERATOR": "A", "RUN_PREFIX": "r", "TRANSPORT": "kafka", "KAFKA_BOOTSTRAP": "k:1", "INSTANCE_ID": "a-1",
        "PREFETCH": "7", "PARALLEL": "3", "SAMPLE_EVERY": "1", "MEASUREMENT": "seconds_truncated", "WORK_MS": "20.5",
        "OPERATOR_PARAMS": '{"x": 1}', "TOPOLOGY": json.dumps(topology), "OPERATOR_IMPL": "passthrough",
        "DEDUP_TTL_S": "0", "METRICS_FLUSH_S": "0.5", "DRAIN_TIMEOUT_S": "5", "ACTIVATION_POLL_S": "0"})
    assert (cfg.transport, cfg.kafka_bootstrap, cfg.instance, cfg.prefetch, cfg.parallel, cfg.sample_every) == \
        ("kafka", "k:1", "a-1", 7, 3, 1)
    assert (cfg.measurement, cfg.work_ms, cfg.params, cfg.impl) == ("seconds_truncated", 20.5, {"x": 1}, "passthrough")
    assert (cfg.dedup_ttl_s, cfg.metrics_flush_s, cfg.drain_timeout_s, cfg.activation_poll_s) == (0, 0.5, 5.0, 0.0)
    assert cfg.wiring().edge("S", "A").consumer_group == "r.S.A"


@pytest.mark.parametrize("env, variable", [
    ({"RUN_PREFIX": "r"}, "OPERATOR"),
    ({"OPERATOR": "O3"}, "RUN_PREFIX"),
    ({**BASE, "RUN_PREFIX": "has space"}, "RUN_PREFIX"),
    ({**BASE, "OPERATOR": "O42"}, "OPERATOR"),
    ({**BASE, "TRANSPORT": "zeromq"}, "TRANSPORT"),
    ({**BASE, "PREFETCH": "five"}, "PREFETCH"),
    ({**BASE, "PREFETCH": "0"}, "PREFETCH"),
    ({**BASE, "PARALLEL": "0"}, "PARALLEL"),
    ({**BASE, "SAMPLE_EVERY": "0"}, "SAMPLE_EVERY"),
    ({**BASE, "MEASUREMENT": "seconds"}, "MEASUREMENT"),
    ({**BASE, "WORK_MS": "-1"}, "WORK_MS"),
    ({**BASE, "WORK_MS": "lots"}, "WORK_MS"),
    ({**BASE, "ACTIVATION_POLL_S": "-0.5"}, "ACTIVATION_POLL_S"),
    ({**BASE, "OPERATOR_PARAMS": "[1]"}, "OPERATOR_PARAMS"),
    ({**BASE, "OPERATOR_PARAMS": "{bad"}, "OPERATOR_PARAMS"),
    ({**BASE, "TOPOLOGY": '{"sources": {"S": ["X"]}, "operators": {"O3": []}}'}, "TOPOLOGY"),
    ({**BASE, "TOPOLOGY": '{"sources": {}, "operators": {"O3": "O4"}}'}, "TOPOLOGY"),
    ({**BASE, "TOPOLOGY": '{"edges": []}'}, "TOPOLOGY"),
    ({**BASE, "OPERATOR": "O1", "TOPOLOGY": '{"sources": {}, "operators": {"O1": []}}'}, "OPERATOR"),  # no input
    ({**BASE, "OPERATOR_FACTORY": "no_colon"}, "OPERATOR_FACTORY"),
])
def test_errors_name_the_variable(env, variable):
    with pytest.raises(ConfigError) as err:
        config_from_env(env)
    assert err.value.variable == variable and str(err.value).startswith(f"{variable}: ")
