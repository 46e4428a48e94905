"""A provider run with the memory transport and a fake clock: what the pattern implies goes out."""
from __future__ import annotations

import collections
import sys
from pathlib import Path

import numpy as np
import pytest

from data_provider.config import ProviderConfig, compose_provider, parse_duration, validate_provider
from data_provider.emitter import FakeClock
from data_provider.provider import expected_items, run_provider, source_specs
from data_provider.transports import MemoryTransport
from operators.envelope import Envelope, payload_image
from testbed.config import ConfigError
from testbed.eventlog import EventLog, read_manifest
from testbed.workloads.patterns import make_pattern
from tests import guarded

ROOT = Path(__file__).resolve().parents[2]


def provider_cfg(tmp_path, *overrides):
    return compose_provider(["transport=memory", f"out={tmp_path}", "run_id=unit", *overrides])


def test_items_follow_the_pattern_and_the_load_table_records_them(tmp_path):
    cfg = provider_cfg(tmp_path, "pattern=stepwise", "pattern.levels=[1,3,2]", "pattern.step_minutes=0.05",
                       "duration=12s")
    transport = MemoryTransport()
    result = run_provider(cfg, clock=FakeClock(), transport=transport)
    tick_s = 0.48
    assert result.ticks == 25
    want = expected_items(make_pattern(cfg.pattern), source_specs(cfg), 25, tick_s)
    assert result.items == want
    # 3-s steps of 1, 3, 2 machines over ticks 0..24 (t = 0 .. 11.52 s)
    machines = [1] * 7 + [3] * 6 + [2] * 6 + [1] * 6
    assert want["S3_temperature"] == 10 * sum(machines)
    assert collections.Counter(m.producer for m in transport.messages) == want
    assert len({m.item_id for m in transport.messages}) == len(transport.messages)

    load = EventLog(result.run_dir).read("load")
    assert list(load.columns) == ["t_s", "machines", "source", "items", "lateness_ms"]
    s3 = load[load.source == "S3_temperature"]
    assert s3.machines.tolist() == machines
    assert s3["items"].tolist() == [10 * m for m in machines]
    assert np.allclose(s3.t_s, np.arange(25) * tick_s)
    assert (load.lateness_ms == 0).all()  # the fake clock never runs late
    manifest = read_manifest(result.run_dir)
    assert manifest.status == "complete" and manifest.experiment == "provider"
    assert manifest.resolved_config["transport"] == "memory"


def test_messages_are_envelopes_with_plausible_payloads(tmp_path):
    cfg = provider_cfg(tmp_path, "pattern=constant", "duration=2s")
    transport = MemoryTransport()
    run_provider(cfg, clock=FakeClock(wall_start_ms=1_763_788_800_000), transport=transport, write_log=False)
    by_type = collections.defaultdict(list)
    for m in transport.messages:
        env = Envelope.decode(m.body)
        assert env.item_id == m.item_id and env.machine_id == m.key
        by_type[env.type].append(env)
        assert m.properties["delivery_mode"] == 2
    temp = by_type["temperature"][0]
    assert set(temp.payload) == {"machine_id", "temperature_c", "timestamp_ms"}
    assert temp.origin_ms == temp.payload["timestamp_ms"]
    # readings of tick 0 are taken during the 480 ms before it is due, the last one at the due time
    tick0 = [e.origin_ms for e in by_type["temperature"] if "/0/" in e.item_id and e.machine_id == "machine-01"]
    assert tick0 == [1_763_788_800_000 - 480 + 48 * (i + 1) for i in range(10)]
    image = payload_image(by_type["production"][0].payload)
    assert image.startswith(b"\x89PNG")
    assert {e.payload["status"] for e in by_type["availability"]} <= {"available", "planned downtime", "defect"}


def test_same_seed_gives_the_same_items(tmp_path):
    bodies = []
    for _ in range(2):
        t = MemoryTransport()
        run_provider(provider_cfg(tmp_path, "pattern=constant", "duration=2s"), clock=FakeClock(), transport=t,
                     write_log=False)
        bodies.append([m.body for m in t.messages])
    assert bodies[0] == bodies[1]


@pytest.mark.parametrize("override, key", [
    ("duration=ten", "duration"), ("prefix=a.b", "prefix"), ("max_machines=0", "max_machines"),
    ("image_compress_level=12", "image_compress_level"), ("kinds.S1_availability=pressure", "kinds"),
    ("pattern.levels=[]", "pattern.levels"), ("payloads.availability.share_defect=2", "payloads.availability"),
])
def test_invalid_values_fail_naming_the_key(tmp_path, override, key):
    with pytest.raises(ConfigError) as info:
        provider_cfg(tmp_path, override)
    assert info.value.key.startswith(key)


def test_amqp_url_is_checked_for_the_rabbitmq_transport():
    cfg = ProviderConfig(amqp_url="http://nope")
    cfg.topology.sources = compose_provider([]).topology.sources
    cfg.topology.operators = compose_provider([]).topology.operators
    with pytest.raises(ConfigError, match="^amqp_url"):
        validate_provider(cfg)


def test_durations():
    assert parse_duration("10m") == 600 and parse_duration("90s") == 90 and parse_duration("1.5h") == 5400
    assert parse_duration("500ms") == 0.5 and parse_duration("60") == 60


@pytest.mark.slow
def test_cli_rejects_a_misspelt_key_and_shows_the_config(tmp_path):
    def cli(*args):
        env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
        return guarded.run([sys.executable, "-m", "testbed.cli", "provider", *args], cwd=tmp_path, cpu_s=300,
                           env=env)

    bad = cli("run", "duraton=1s")
    assert bad.returncode == 2 and "duraton" in bad.stderr
    shown = cli("config", "pattern=two_level", "transport=kafka")
    assert shown.returncode == 0 and "transport: kafka" in shown.stdout and "name: two_level" in shown.stdout
    ran = cli("run", "pattern=constant", "duration=1s", "transport=memory", "out=runs", "run_id=cli")
    assert ran.returncode == 0, ran.stderr
    assert (tmp_path / "runs" / "constant" / "cli" / "load.parquet").is_file()
