"""The OEE operators' pure logic (formulas, payload checks, params, PDF report) and the registry.
Their Redis state is tested against a real Redis in tests/integration/test_operator_state.py."""
from __future__ import annotations

import re
import subprocess
import sys
import zlib

import pytest
import redis

from operators.api import OperatorContext, PoisonItem
from operators.envelope import Envelope
from operators.oee.availability import availability, downtime_increments
from operators.oee.params import OperatorParamError
from operators.oee.performance import PerformanceCalculator, PerformanceParams, performance
from operators.oee.quality import quality
from operators.oee.records import OeeValue, PartValue, ProductionRecord
from operators.oee.report import render_pdf, summarise
from operators.oee.temperature_monitor import TemperatureMonitorParams
from operators.registry import OPERATORS, UnknownOperator, make_operator
from testbed.workloads.payloads import ProductionModel, TemperatureModel


def record(**kw) -> ProductionRecord:
    base = dict(record_id="machine-01/S2_production/4/0", machine_id="machine-01", machine_type="cnc milling",
                location="hall 1 line 2", produced_units=45, defective_units=1, planned_production_time_s=60,
                status="available", timestamp_ms=1_000)
    return ProductionRecord(**{**base, **kw})


def unconnected_redis() -> redis.Redis:
    """A real client that is never used to connect: building an operator only registers scripts."""
    return redis.Redis(host="127.0.0.1", port=1)


def ctx(op: str, **params) -> OperatorContext:
    return OperatorContext(op, f"{op}-test", "run1", unconnected_redis(), params)


def test_performance_defaults_follow_the_providers_production_model():
    model = ProductionModel()
    params = PerformanceParams()
    assert params.reporting_cycle_s == model.reporting_cycle_s
    assert all(params.ideal_for(t) == model.ideal_cycle_s for t in ("injection moulding", "cnc milling", "assembly"))
    ideal_units = int(model.reporting_cycle_s / model.ideal_cycle_s)
    assert performance(record(produced_units=ideal_units), params) == pytest.approx(1.0)
    assert performance(record(produced_units=45), params) == pytest.approx(0.9)
    assert performance(record(produced_units=0, status="defect"), params) == 0.0


def test_performance_uses_the_ideal_time_of_the_machine_type():
    op = PerformanceCalculator(ctx("O3", ideal_cycle_s={"assembly": 2.0}, default_ideal_cycle_s=1.0,
                                   reporting_cycle_s=60))
    env = Envelope("r/O1", "machine-03", "production_record", 5, 6, record(machine_type="assembly").to_payload())
    (e,) = op.process(env)
    assert (e.item_id, e.type) == ("r/O1/O3", "performance")
    assert PartValue.from_payload(e.payload) == PartValue(record().record_id, "machine-01", "performance", 1.5, 1_000)
    unknown = Envelope("r/O1", "machine-03", "production_record", 5, 6, record(machine_type="").to_payload())
    assert op.process(unknown)[0].payload["value"] == pytest.approx(0.75)


def test_downtime_per_status():
    assert downtime_increments(record(), 60) == {"total_s": 60, "scheduled_s": 0, "unscheduled_s": 0}
    assert downtime_increments(record(status="planned downtime", planned_production_time_s=0, produced_units=0), 60) \
        == {"total_s": 60, "scheduled_s": 60, "unscheduled_s": 0}
    assert downtime_increments(record(status="defect", produced_units=0), 60) \
        == {"total_s": 60, "scheduled_s": 0, "unscheduled_s": 60}
    assert downtime_increments(record(planned_production_time_s=90), 60)["scheduled_s"] == 0  # misread: capped


def test_availability_and_quality_formulas():
    assert availability({"total_s": 600, "scheduled_s": 60, "unscheduled_s": 120}) == pytest.approx(0.7)
    assert quality({"produced": 200, "defective": 5}) == pytest.approx(0.975)
    assert quality({"produced": 0, "defective": 0}) == 1.0


def test_malformed_payloads_are_poison():
    good = record().to_payload()
    for broken in ({k: v for k, v in good.items() if k != "produced_units"}, {**good, "produced_units": "45"},
                   {**good, "defective_units": -1}, {**good, "timestamp_ms": True}):
        with pytest.raises(PoisonItem):
            ProductionRecord.from_payload(broken)
    with pytest.raises(PoisonItem, match="unknown part"):
        PartValue.from_payload({"record_id": "r", "machine_id": "m", "part": "speed", "value": 1.0, "timestamp_ms": 1})
    with pytest.raises(PoisonItem, match="value"):
        PartValue.from_payload({"record_id": "r", "machine_id": "m", "part": "quality", "value": float("nan"),
                                "timestamp_ms": 1})


def test_params_fail_naming_the_key():
    with pytest.raises(OperatorParamError, match=r"O6.params.threshold"):
        make_operator("O6", ctx("O6", threshold=90))
    with pytest.raises(OperatorParamError, match=r"O3.params.ideal_cycle_s.assembly"):
        make_operator("O3", ctx("O3", ideal_cycle_s={"assembly": 0}))
    with pytest.raises(OperatorParamError, match=r"O9.params.batch_size"):
        make_operator("O9", ctx("O9", batch_size="300"))
    assert make_operator("O6", ctx("O6", threshold_c=90)).params.threshold_c == 90.0
    assert TemperatureMonitorParams().threshold_c == TemperatureModel().threshold_c


def test_registry_builds_every_operator_and_names_unknown_ones():
    assert set(OPERATORS) == {f"O{i}" for i in range(1, 10)} | {"passthrough"} | set("ABCD")  # A-D: PRESPS chain
    for name in OPERATORS:
        op = make_operator(name, ctx(name))
        assert callable(op.process) and callable(op.close)
    with pytest.raises(UnknownOperator, match=r"unknown operator 'O10'; known: O1, O2"):
        make_operator("O10", ctx("O10"))


def test_passthrough_emits_one_item_per_input():
    env = Envelope("a/1", "m", "temperature", 5, 6, {"temperature_c": 70.0})
    (e,) = make_operator("passthrough", ctx("P")).process(env)
    assert (e.item_id, e.type, dict(e.payload)) == ("a/1/P", "temperature", {"temperature_c": 70.0})
    out = e.envelope(env, sent_ms=9)
    assert (out.machine_id, out.origin_ms, out.sent_ms) == ("m", 5, 9)


def oee_values(n: int):
    return [OeeValue(f"machine-0{i % 3 + 1}/S2/{i}/0", f"machine-0{i % 3 + 1}", 0.9, 0.8 + 0.01 * (i % 5), 0.98,
                     0.9 * (0.8 + 0.01 * (i % 5)) * 0.98, 1_763_788_800_000 + 480 * i) for i in range(n)]


def test_report_summary_and_pdf():
    values = oee_values(30)
    notice = summarise(values, "/tmp/r.pdf", 4)
    assert (notice.batch, notice.inputs, notice.machines) == (4, 30, 3)
    assert notice.min_oee == pytest.approx(0.9 * 0.8 * 0.98) and notice.max_oee == pytest.approx(0.9 * 0.84 * 0.98)
    assert notice.mean_performance == pytest.approx(0.82)
    pdf = render_pdf(values, notice, "OEE report run1 #4")
    assert pdf.startswith(b"%PDF-") and pdf.rstrip().endswith(b"%%EOF")
    shown = b" ".join(t for m in re.finditer(rb"stream\r?\n(.*?)\r?\nendstream", pdf, re.S)
                      for t in re.findall(rb"\((.*?)\) Tj", zlib.decompress(m.group(1))))
    assert b"OEE report run1 #4" in shown and b"machine-03 10" in shown and b"OEE mean 0.723" in shown
    assert render_pdf(values, notice, "OEE report run1 #4") == pdf  # same batch, same bytes
    assert render_pdf(values[:29], summarise(values[:29], "/tmp/r.pdf", 4), "OEE report run1 #4") != pdf


def test_the_operators_package_stays_slim():
    """The operator images hold only pika, redis, kafka-python (and fpdf2 for O9): importing the
    registry must not pull in the testbed, the data provider or the scientific stack."""
    code = ("import sys, operators.registry; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'testbed', 'data_provider', 'numpy', 'pandas', 'hydra', 'omegaconf', 'PIL', 'fpdf', 'pyspark'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
