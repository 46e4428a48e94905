"""Busy wall time against busy time less run-queue delay and CPU time of O1's OCR, measured as the live
runner measures them (one worker thread registered with operators.metrics.CpuTime and RunDelay, O1's
own tesseract call), first beside no extra load and then beside HOGS busy processes. Hogs and
measurement run at the same low priority (nice 19): the hogs take the measuring thread's CPU, not
other work's on the machine.

Prints per load the mean wall time, wall time less run-queue delay, and CPU time per image: a wall
time that grows with the load and the other two that do not is what lets `testbed live-profile` read
service times independent of the machine's other load.

    .venv/bin/python benchmarks/bench_cpu_time.py [IMAGES=15] [HOGS=2]
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import List, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from data_provider.display_image import render_display  # noqa: E402
from operators.metrics import CpuTime, RunDelay  # noqa: E402
from operators.oee.tesseract import ocr_text  # noqa: E402
from testbed.workloads.payloads import Machine  # noqa: E402


def measure(images: List[bytes]) -> List[Tuple[float, float, float]]:
    """(wall s, run-queue delay s, CPU s) per OCR, in a worker thread as the runner's."""
    cpu, delay, out = CpuTime(), RunDelay(), []

    def work() -> None:
        cpu.register(0)
        delay.register(0)
        for png in images:
            start = time.monotonic()
            cpu.take()
            delay.take()
            delay.start(0)
            ocr_text(png)
            delay.stop(0)
            out.append((time.monotonic() - start, delay.take() or 0.0, cpu.take()))
        delay.unregister(0)
        cpu.unregister(0)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    return out


def main(n: int, hogs: int) -> None:
    os.nice(19)
    machines = [Machine(i, seed=11) for i in range(8)]
    images = []
    for k in range(n):
        m = machines[k % len(machines)]
        m.step()
        images.append(render_display(m.production(1_700_000_000_000 + 480 * k)))
    for load in (0, hogs):
        procs = [subprocess.Popen([sys.executable, "-c", "import os; os.nice(19)\nwhile True: pass"])
                 for _ in range(load)]
        try:
            time.sleep(0.5)
            r = measure(images)
        finally:
            for p in procs:
                p.kill()
                p.wait()
        wall, delay = statistics.mean(w for w, _, _ in r), statistics.mean(d for _, d, _ in r)
        cpu = statistics.mean(c for _, _, c in r)
        print(f"{load} hog(s): wall {1000 * wall:.0f} ms, wall less run-queue delay {1000 * (wall - delay):.0f} ms, "
              f"CPU {1000 * cpu:.0f} ms per image (n={len(r)})")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 15, int(sys.argv[2]) if len(sys.argv) > 2 else 2)
