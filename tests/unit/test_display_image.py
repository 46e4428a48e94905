"""The production display image: 850×300 PNG with eight `key : value` lines, read back by tesseract."""
from __future__ import annotations

import io
import os

import pytest
from PIL import Image

from data_provider.display_image import (
    LINES,
    DisplayReadError,
    display_lines,
    parse_display,
    read_display,
    render_display,
    tesseract_available,
)
from testbed.workloads.payloads import DEFECT, PLANNED_DOWNTIME, Machine, ProductionRecord

# CI installs tesseract (infra/services.sh install); elsewhere a missing binary skips, never hides a failure in CI
needs_tesseract = pytest.mark.skipif(not tesseract_available() and not os.environ.get("CI"),
                                     reason="tesseract not installed (bash infra/services.sh install)")


def records(n: int):
    out = []
    for i in range(n):
        m = Machine(i * 5, seed=3)
        for _ in range(40 * i + 1):
            m.step()
        out.append(m.production(1_763_788_800_000 + 480 * 1000 * i + 17 * i))
    return out


def test_image_is_850x300_png_of_about_12kB():
    png = render_display(records(1)[0])
    img = Image.open(io.BytesIO(png))
    assert img.format == "PNG" and img.size == (850, 300)
    assert 6_000 < len(png) < 20_000
    lo, hi = img.convert("L").getextrema()
    assert (lo, hi) == (0, 255)  # black text on white


def test_the_eight_lines_are_key_colon_value():
    r = records(1)[0]
    lines = display_lines(r)
    assert len(lines) == 8 == len(LINES)
    assert lines[0] == f"machine id  :  {r.machine_id}"
    assert lines[5] == f"planned production time  :  {r.planned_production_time_s} s"
    assert lines[7] == f"timestamp  :  {r.timestamp_ms}"


@needs_tesseract
@pytest.mark.slow
def test_ocr_returns_every_field():
    recs = records(3) + [
        ProductionRecord("machine-64", "cnc milling", "hall 8 line 8", 0, 0, 0, PLANNED_DOWNTIME, 1_999_999_999_999),
        ProductionRecord("machine-10", "assembly", "hall 2 line 2", 0, 0, 60, DEFECT, 1_000_000_000_001),
    ]
    for r in recs:
        assert read_display(render_display(r)) == r


def test_parser_tolerates_usual_ocr_confusions():
    text = "\n".join([
        "machine id = machine-O7", "machlne type : cnc  milling", "location : hall1 line 3",
        "produced units : 4l", "defective units : O", "planned production time: 60s",
        "status : planned downtlme", "timestamp : 1763788800l23", "",
    ])
    assert parse_display(text) == ProductionRecord("machine-07", "cnc milling", "hall 1 line 3", 41, 0, 60,
                                                   PLANNED_DOWNTIME, 1763788800123)


def test_parser_names_missing_fields():
    with pytest.raises(DisplayReadError) as info:
        parse_display("machine id : machine-01\nstatus : available\nproduced units : many\n")
    assert "produced_units" in info.value.missing and "timestamp_ms" in info.value.missing
    assert "machine_id" not in info.value.missing
