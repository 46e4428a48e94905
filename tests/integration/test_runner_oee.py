"""One production item through the OEE operators O1 ... O9, each in its own runner process,
against real RabbitMQ and Redis (and tesseract for O1's OCR)."""
from __future__ import annotations

import json
import shutil
import signal
import time

import pika
import pika.exceptions
import pytest

from data_provider.display_image import render_display
from operators.api import processed_hash
from operators.envelope import Envelope, image_payload
from operators.oee.latency_sink import latency_stream
from operators.topology import oee_topology
from operators.transports import declare_wiring
from operators.wiring import delete, make_wiring
from testbed.workloads.payloads import ProductionRecord

from .runner_helpers import RunnerProcess, drain, publish, queue_state, runner_env, wait_for

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("tesseract") is None, reason="O1 needs tesseract (infra/services.sh)")]

OPERATORS = ("O1", "O3", "O4", "O5", "O7", "O9", "O8")  # the production item's path (O2, O6: other sources)


def test_one_production_item_yields_its_oee_and_a_report(rabbitmq_url, redis_client, unique_prefix, tmp_path):
    topology = oee_topology()
    wiring = make_wiring(topology["sources"], topology["operators"], unique_prefix)
    declare_wiring(rabbitmq_url, wiring)
    conn = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    ch = conn.channel()
    ch.confirm_delivery()
    r = redis_client
    taps = {}
    for producer in ("O7", "O9"):  # extra queues on the fanout exchanges: what O7 and O9 emit
        taps[producer] = f"{unique_prefix}.tap.{producer}"
        ch.queue_declare(taps[producer], durable=False, auto_delete=False)
        ch.queue_bind(taps[producer], wiring.exchange(producer))
    params = {"O9": {"batch_size": 1, "report_dir": str(tmp_path / "reports")}}
    procs = [RunnerProcess(runner_env(op, unique_prefix, topology, AMQP_URL=rabbitmq_url,
                                      OPERATOR_PARAMS=json.dumps(params.get(op, {}))), tmp_path / f"{op}.log")
             for op in OPERATORS]
    try:
        for op, p in zip(OPERATORS, procs, strict=True):
            queue = wiring.inputs(op)[0].queue
            wait_for(f"{op} to consume", lambda q=queue: queue_state(ch, q)[1] >= 1, proc=p)
        now = int(time.time() * 1000)
        record = ProductionRecord(machine_id="machine-01", machine_type="cnc milling", location="hall 1",
                                  produced_units=45, defective_units=2, planned_production_time_s=60,
                                  status="available", timestamp_ms=now)
        item = Envelope("machine-01/S2_production/0/0", "machine-01", "production", now, now,
                        image_payload(render_display(record)))
        publish(ch, wiring.exchange("S2_production"), [item])

        wait_for("the report", lambda: queue_state(ch, taps["O9"])[0] == 1, timeout_s=60,
                 proc=procs[OPERATORS.index("O9")])
        wait_for("O8 to record it", lambda: r.xlen(latency_stream(unique_prefix)) == 1, proc=procs[-1])
        [oee] = drain(ch, taps["O7"])
        [report] = drain(ch, taps["O9"])
        # performance 45 x 1.2 s / 60 s; availability: planned the whole cycle, no defect; quality 43/45
        want = 0.9 * 1.0 * (43 / 45)
        assert oee.type == "oee" and oee.machine_id == "machine-01" and oee.origin_ms == now
        assert oee.payload["record_id"] == item.item_id
        assert (oee.payload["performance"], oee.payload["availability"]) == (pytest.approx(0.9), pytest.approx(1.0))
        assert oee.payload["quality"] == pytest.approx(43 / 45)
        assert oee.payload["oee"] == pytest.approx(want)
        assert report.type == "report" and report.payload["inputs"] == 1
        assert report.payload["mean_oee"] == pytest.approx(want)
        assert (tmp_path / "reports").is_dir() and any((tmp_path / "reports").iterdir())
        for p in procs:
            p.signal(signal.SIGTERM)
        for p in procs:
            assert p.wait(20) == 0, p.log()
        counts = {k.decode(): int(v) for k, v in r.hgetall(processed_hash(unique_prefix)).items()}
        assert counts == {"O1": 1, "O3": 1, "O4": 1, "O5": 1, "O7": 3, "O9": 1, "O8": 1}
        assert all(queue_state(ch, q)[0] == 0 for q in wiring.queues())
    finally:
        for p in procs:
            p.stop()
        for tap in taps.values():
            ch.queue_delete(tap)
        delete(ch, wiring)
        conn.close()
