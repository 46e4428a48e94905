"""CPU of the live job's worker containers (docs/papers/daedalus.md#live-runtime): the cumulative
CPU time of a container's cgroup, read where the engine's cgroup driver puts it, and its increase
over a window as a fraction of the container's quota (what Flink's TaskManager CPU load is relative
to its limit, and what HPA divides by the request).

cgroup v1 (cgroupfs driver): /sys/fs/cgroup/cpuacct/docker/<id>/cpuacct.usage, nanoseconds.
cgroup v2: <root>/docker/<id>/cpu.stat (cgroupfs) or <root>/system.slice/docker-<id>.scope/cpu.stat
(systemd), line `usage_usec`, microseconds. Readable on the engine's own machine only."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

CGROUP_ROOT = Path("/sys/fs/cgroup")


def usage_paths(container_id: str, root: Path = CGROUP_ROOT) -> List[Path]:
    """Where a container's CPU usage may be, in the order they are tried."""
    return [root / "cpuacct" / "docker" / container_id / "cpuacct.usage",
            root / "cpu,cpuacct" / "docker" / container_id / "cpuacct.usage",
            root / "docker" / container_id / "cpu.stat",
            root / "system.slice" / f"docker-{container_id}.scope" / "cpu.stat"]


def parse_usage_ns(path: Path, text: str) -> int:
    """Cumulative CPU time in ns from a cpuacct.usage (ns) or cpu.stat (usage_usec) file's text."""
    if path.name == "cpuacct.usage":
        return int(text.strip())
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == "usage_usec":
            return int(value) * 1000
    raise ValueError(f"{path}: no usage_usec line")


def find_usage_path(container_id: str, root: Path = CGROUP_ROOT) -> Optional[Path]:
    return next((p for p in usage_paths(container_id, root) if p.is_file()), None)


def read_usage_ns(path: Path) -> int:
    return parse_usage_ns(path, path.read_text())


def cpu_fraction(usage0_ns: int, usage1_ns: int, seconds: float, quota_cores: float) -> float:
    """CPU used between two readings `seconds` apart as a fraction of the quota (1 = all of it)."""
    if seconds <= 0 or quota_cores <= 0:
        raise ValueError(f"seconds and quota must be > 0, got {seconds}, {quota_cores}")
    return max(0.0, (usage1_ns - usage0_ns) / 1e9 / seconds / quota_cores)
