"""O1: reading the production display (tolerant parser, tesseract on rendered images, poison items)."""
from __future__ import annotations

import io
import os

import pytest
from PIL import Image

from data_provider import display_image
from data_provider.display_image import display_lines, render_display, tesseract_available
from operators.api import OperatorContext, PoisonItem
from operators.envelope import Envelope, image_payload
from operators.oee import display_parser, records
from operators.oee.display_parser import DisplayParseError, parse_display_text
from operators.oee.ocr_parse import OcrParse, record_from_text
from operators.oee.params import OperatorParamError
from operators.oee.records import PRODUCTION_RECORD, ProductionRecord
from testbed.workloads import payloads
from testbed.workloads.payloads import Machine

needs_tesseract = pytest.mark.skipif(not tesseract_available() and not os.environ.get("CI"),
                                     reason="tesseract not installed (bash infra/services.sh install)")


def sample_records(n_per_status: int = 2, seed: int = 5):
    """Production records of several machines covering every status (the provider's own model)."""
    found = {s: [] for s in payloads.STATUSES}
    machines = [Machine(i, seed) for i in range(6)]
    ts = 1_763_788_812_345
    while any(len(v) < n_per_status for v in found.values()):
        for m in machines:
            m.step()
            ts += 480
            rec = m.production(ts)
            if len(found[rec.status]) < n_per_status:
                found[rec.status].append(rec)
    return [r for v in found.values() for r in v]


def envelope_of(rec: payloads.ProductionRecord, png: bytes | None = None, item_id: str = "m/S2/7/0") -> Envelope:
    payload = image_payload(render_display(rec) if png is None else png)
    return Envelope(item_id, rec.machine_id, "production", rec.timestamp_ms, rec.timestamp_ms + 3, payload)


def o1(**params) -> OcrParse:
    return OcrParse(OperatorContext("O1", "o1-test", "p", None, params))


def test_the_parsers_vocabulary_is_the_providers():
    assert tuple(display_parser.LABELS) == tuple(display_image.LINES)
    assert display_parser.MACHINE_TYPES == payloads.MACHINE_TYPES
    assert records.STATUSES == payloads.STATUSES


@pytest.mark.parametrize("rec", sample_records(1))
def test_clean_display_text_parses_to_the_record(rec):
    fields = parse_display_text("\n".join(display_lines(rec)))
    assert (fields.machine_id, fields.machine_type, fields.location, fields.produced_units, fields.defective_units,
            fields.planned_production_time_s, fields.status, fields.timestamp_ms) == (
        rec.machine_id, rec.machine_type, rec.location, rec.produced_units, rec.defective_units,
        rec.planned_production_time_s, rec.status, rec.timestamp_ms)


def test_noisy_text_is_read_tolerantly():
    text = "\n".join([
        "machlne id ; machine - O7",  # misread key, ; for :, O for 0, stray spaces
        "machine tyqe : cnc miling",
        "Iocation : ha1l 2 Iine 3",
        "",
        "produced unlts : 4 O",  # a split number with O for 0
        "defective units  l",  # no separator, l for 1
        "planned producton time : 6O s",
        "Status : defcct",
        "timestamp : 17637888l2345",
        "some garbage line",
    ])
    f = parse_display_text(text)
    assert f.machine_id == "machine-07"
    assert f.machine_type == "cnc milling"
    assert f.location == "hall 2 line 3"
    assert (f.produced_units, f.defective_units, f.planned_production_time_s) == (40, 1, 60)
    assert f.status == "defect"
    assert f.timestamp_ms == 1763788812345


@pytest.mark.parametrize("raw,expected", [("60 s", 60), ("60s", 60), ("6O sec", 60), ("60 5", 60), ("60 $", 60),
                                          ("6 0 s", 60), ("6 0", 60), ("0 s", 0), ("l20 s", 120)])
def test_planned_production_time_survives_its_unit(raw, expected):
    assert display_parser.integer(raw, unit=True) == expected


def test_optional_fields_may_be_unreadable_but_required_ones_may_not():
    f = parse_display_text("produced units : 45\ndefective units : 0\nplanned production time : 0 s\n"
                           "status : planned downtime")
    assert (f.machine_id, f.machine_type, f.timestamp_ms) == (None, None, None)
    assert f.status == "planned downtime" and f.planned_production_time_s == 0
    with pytest.raises(DisplayParseError) as err:
        parse_display_text("machine id : machine-01\nproduced units : 4x5\nstatus : exploded")
    assert set(err.value.missing) == {"produced_units", "defective_units", "planned_production_time_s", "status"}
    assert "4x5" in str(err.value)


def test_record_from_text_uses_the_envelopes_id_and_origin_and_rejects_inconsistent_counts():
    rec = sample_records(1)[0]
    env = envelope_of(rec, png=b"unused", item_id="machine-01/S2_production/9/0")
    text = "\n".join(line for line in display_lines(rec) if not line.startswith("timestamp"))
    out = record_from_text(env, text.replace(f"machine id  :  {rec.machine_id}", "machine id  :  rnachine-99"))
    assert out.record_id == "machine-01/S2_production/9/0"
    assert out.machine_id == rec.machine_id and out.timestamp_ms == env.origin_ms
    bad = text.replace(f"defective units  :  {rec.defective_units}", f"defective units  :  {rec.produced_units + 1}")
    with pytest.raises(PoisonItem, match="defective"):
        record_from_text(env, bad)


def test_o1_params_are_checked():
    with pytest.raises(OperatorParamError, match="O1.params.psn"):
        o1(psn=6)
    with pytest.raises(OperatorParamError, match="timeout_s"):
        o1(timeout_s=0)


def test_an_envelope_without_an_image_is_poison():
    rec = sample_records(1)[0]
    env = Envelope("x", rec.machine_id, "production", 1, 2, {"png": "..."})
    with pytest.raises(PoisonItem, match="png_b64"):
        o1().process(env)


@needs_tesseract
@pytest.mark.parametrize("rec", sample_records(2))
def test_o1_reads_a_rendered_display_image(rec):
    env = envelope_of(rec, item_id=f"{rec.machine_id}/S2_production/3/0")
    (emission,) = o1().process(env)
    assert emission.type == PRODUCTION_RECORD
    assert emission.item_id == f"{env.item_id}/O1"
    assert ProductionRecord.from_payload(emission.payload) == ProductionRecord(
        record_id=env.item_id, machine_id=rec.machine_id, machine_type=rec.machine_type, location=rec.location,
        produced_units=rec.produced_units, defective_units=rec.defective_units,
        planned_production_time_s=rec.planned_production_time_s, status=rec.status, timestamp_ms=rec.timestamp_ms)


@needs_tesseract
def test_o1_is_deterministic_for_a_redelivered_image():
    rec = sample_records(1)[0]
    env = envelope_of(rec)
    op = o1()
    assert op.process(env) == op.process(env)


@needs_tesseract
def test_unreadable_images_are_poison():
    rec = sample_records(1)[0]
    with pytest.raises(PoisonItem, match="tesseract failed"):
        o1().process(envelope_of(rec, png=b"\x89PNG\r\n\x1a\n this is no image"))
    blank = io.BytesIO()
    Image.new("L", (850, 300), 255).save(blank, "PNG")
    with pytest.raises(PoisonItem, match="cannot read produced_units"):
        o1().process(envelope_of(rec, png=blank.getvalue()))
