from pathlib import Path

from tests.timeline import read, report


def test_the_timeline_names_each_worker_span_and_lane(tmp_path: Path):
    path = tmp_path / "timeline"
    path.write_text("gw0\t100.0\t160.0\ttests/integration/test_live_run.py::test_a\n"
                    "gw1\t100.0\t110.0\ttests/unit/test_x.py::test_b\n"
                    "gw1\t110.0\t130.0\ttests/integration/test_flink_engine.py::test_c\n"
                    "gw1\t130.0\t1", encoding="utf-8")  # the last line cut short by a killed worker
    rows = read(path)
    assert len(rows) == 3
    text = report(rows)
    assert "3 tests, 60 s from the first start" in text
    assert "gw0: 1 tests, 0-60 s, busy 60 s" in text and "gw1: 2 tests, 0-30 s, busy 30 s" in text
    assert "engines 20 s, other 10 s, services 60 s" in text
    assert text.index("tests/integration/test_live_run.py") < text.index("tests/unit/test_x.py")
