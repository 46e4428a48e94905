"""O1's OCR time per production display image on this machine.

Renders IMAGES displays of the provider's machines (all statuses, as the provider draws them) and
runs O1 on each, one at a time: prints the wall time per image (tesseract process + parse; mean,
median, p90, max), the CPU time of the tesseract children per image, and how many images were
read back exactly. The original operator spent ~450 ms per image
(docs/papers/btu-provisioning.md#visp-operators).

    .venv/bin/python benchmarks/bench_ocr.py [IMAGES=40]
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from data_provider.display_image import render_display  # noqa: E402
from operators.api import OperatorContext  # noqa: E402
from operators.envelope import Envelope, image_payload  # noqa: E402
from operators.oee.ocr_parse import OcrParse  # noqa: E402
from testbed.workloads.payloads import Machine  # noqa: E402


def main(n: int) -> None:
    machines = [Machine(i, seed=11) for i in range(8)]
    op = OcrParse(OperatorContext("O1", "bench", "bench", None, {}))
    walls, exact = [], 0
    ts = int(time.time() * 1000)
    op.process(Envelope("warmup", machines[0].machine_id, "production", ts, ts,
                        image_payload(render_display(machines[0].production(ts)))))  # page cache, traineddata
    cpu0 = os.times()
    for k in range(n):
        m = machines[k % len(machines)]
        m.step()
        rec = m.production(ts + 480 * k)
        env = Envelope(f"{m.machine_id}/S2/{k}/0", m.machine_id, "production", rec.timestamp_ms, rec.timestamp_ms,
                       image_payload(render_display(rec)))
        start = time.perf_counter()
        (out,) = op.process(env)
        walls.append((time.perf_counter() - start) * 1000)
        p = out.payload
        exact += (p["produced_units"], p["defective_units"], p["planned_production_time_s"], p["status"],
                  p["machine_type"], p["location"], p["timestamp_ms"]) == (
            rec.produced_units, rec.defective_units, rec.planned_production_time_s, rec.status, rec.machine_type,
            rec.location, rec.timestamp_ms)
    cpu1 = os.times()
    child_cpu_ms = ((cpu1.children_user - cpu0.children_user)
                    + (cpu1.children_system - cpu0.children_system)) * 1000 / n
    walls.sort()
    print(f"O1 OCR per image ({n} images, 850x300 PNG, tesseract --psm 6, one thread): "
          f"mean {statistics.fmean(walls):.0f} ms, median {statistics.median(walls):.0f} ms, "
          f"p90 {walls[int(0.9 * (n - 1))]:.0f} ms, max {walls[-1]:.0f} ms; "
          f"tesseract CPU {child_cpu_ms:.0f} ms/image; read exactly: {exact}/{n}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
