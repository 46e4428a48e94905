"""A CPU limit per TaskManager, as a pod's: a cgroup of its own with a CFS quota, which its JVM (and
everything the start script runs before it) joins before exec, so the limit holds from the first
instruction and the TaskManager stays our child process (pid, signals, parent-death signal as for
any other). cgroup v2 (`cpu.max`, usage from `cpu.stat`) where its cpu controller is available, else
v1 (`cpu.cfs_quota_us`; usage from `cpuacct.usage`), as on machines whose cpu controller is bound to a
v1 hierarchy. Layout: <hierarchy>/testbed-flink/<owner pid>-<cluster>/<taskmanager>. A TaskManager's
cgroup is removed when it has been stopped (killed ones included) and the cluster's when it closes;
those of a controller that died (parent-death signal: its JVMs died with it) are swept at the next
cluster's start. Parsing and choosing are pure functions; the class does the file system work."""
from __future__ import annotations

import errno
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

log = logging.getLogger(__name__)

BASE = "testbed-flink"
PERIOD_US = 100_000  # the CFS period Kubernetes uses for a pod's CPU limit


class CgroupError(RuntimeError):
    """No cgroup with a CPU controller this process may create, or a cgroup file not as expected."""


@dataclass(frozen=True)
class Mount:
    path: Path
    fstype: str
    options: Tuple[str, ...]


@dataclass(frozen=True)
class Hierarchy:
    """Where CPU limits are set and CPU usage is read."""

    version: int  # 1 or 2
    cpu: Path  # the quota's hierarchy (v2: the unified one)
    acct: Path  # the usage's hierarchy (v1: cpuacct, possibly the same mount; v2: = cpu)


@dataclass(frozen=True)
class Usage:
    """A cgroup's CPU use so far."""

    cpu_s: float  # CPU time of its processes, live and exited
    periods: int  # CFS periods in which it ran
    throttled: int  # periods in which it hit its quota
    throttled_s: float  # time its runnable processes waited for the next period


def parse_mounts(text: str) -> List[Mount]:
    """/proc/mounts (or /proc/self/mounts): the cgroup (v1) and cgroup2 file systems."""
    mounts = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
            path = parts[1].replace("\\040", " ")
            mounts.append(Mount(Path(path), parts[2], tuple(parts[3].split(","))))
    return mounts


def choose(mounts: Sequence[Mount], v2_controllers: Mapping[Path, str]) -> Optional[Hierarchy]:
    """v2 if a cgroup2 mount offers the cpu controller (its cgroup.controllers in v2_controllers),
    else v1's cpu and cpuacct mounts; None without either."""
    for m in mounts:
        if m.fstype == "cgroup2" and "cpu" in v2_controllers.get(m.path, "").split():
            return Hierarchy(2, m.path, m.path)
    v1 = [m for m in mounts if m.fstype == "cgroup"]
    cpu = next((m.path for m in v1 if "cpu" in m.options), None)
    acct = next((m.path for m in v1 if "cpuacct" in m.options), None)
    if cpu is None or acct is None:
        return None
    return Hierarchy(1, cpu, acct)


def quota_us(cores: float, period_us: int = PERIOD_US) -> int:
    """The CFS quota per period for a limit of `cores` (the kernel's least is 1 ms)."""
    return max(1000, int(round(cores * period_us)))


def limit_files(version: int, cores: float, period_us: int = PERIOD_US) -> List[Tuple[str, str]]:
    """(file, content) to write, in order, for a limit of `cores`."""
    quota = quota_us(cores, period_us)
    if version == 2:
        return [("cpu.max", f"{quota} {period_us}")]
    return [("cpu.cfs_period_us", str(period_us)), ("cpu.cfs_quota_us", str(quota))]


def _fields(text: str) -> Dict[str, int]:
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


def parse_usage(version: int, cpu_stat: str, cpuacct_usage: str = "") -> Usage:
    """Usage from v2's cpu.stat (microseconds) or v1's cpu.stat (throttling, nanoseconds) and
    cpuacct.usage (nanoseconds)."""
    stat = _fields(cpu_stat)
    try:
        if version == 2:
            return Usage(stat["usage_usec"] / 1e6, stat.get("nr_periods", 0), stat.get("nr_throttled", 0),
                         stat.get("throttled_usec", 0) / 1e6)
        return Usage(int(cpuacct_usage.strip()) / 1e9, stat.get("nr_periods", 0), stat.get("nr_throttled", 0),
                     stat.get("throttled_time", 0) / 1e9)
    except (KeyError, ValueError) as e:
        raise CgroupError(f"unexpected cgroup v{version} usage ({e!r}): {cpu_stat[:200]!r} "
                          f"{cpuacct_usage[:40]!r}") from None


def owner_pid(cluster_dir: str) -> Optional[int]:
    """The pid of the controller that made a cluster's cgroup (its name `<pid>-<cluster>`)."""
    head = cluster_dir.split("-", 1)[0]
    return int(head) if head.isdigit() else None


def detect() -> Hierarchy:
    """This machine's CPU hierarchy; CgroupError (saying why) if there is none."""
    mounts = parse_mounts(Path("/proc/self/mounts").read_text())
    controllers = {}
    for m in mounts:
        if m.fstype == "cgroup2":
            try:
                controllers[m.path] = (m.path / "cgroup.controllers").read_text()
            except OSError:
                controllers[m.path] = ""
    found = choose(mounts, controllers)
    if found is None:
        raise CgroupError("no cgroup hierarchy with a cpu controller is mounted (neither cgroup2 offering "
                          "`cpu` nor cgroup v1 `cpu` and `cpuacct`)")
    return found


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _write(path: Path, content: str) -> None:
    with open(path, "w") as f:
        f.write(content)


def _rmdir(path: Path, timeout_s: float) -> bool:
    """Removes an empty cgroup, waiting up to timeout_s for its processes to be gone; then kills
    what is still in it (a TaskManager's leftovers: ours) and tries once more."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError as e:
            if e.errno != errno.EBUSY:
                raise
        if time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    for pid in _procs(path):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    time.sleep(0.2)
    try:
        path.rmdir()
        return True
    except OSError:
        return not path.exists()


def _procs(path: Path) -> List[int]:
    try:
        return [int(p) for p in (path / "cgroup.procs").read_text().split()]
    except OSError:
        return []


class ClusterCgroups:
    """The cgroups of one cluster's TaskManagers, each limited to `cores`."""

    def __init__(self, hierarchy: Hierarchy, cluster: str, cores: float, period_us: int = PERIOD_US):
        self.hierarchy = hierarchy
        self.cores = cores
        self.period_us = period_us
        self.name = f"{os.getpid()}-{cluster}"
        self.final: Dict[str, Usage] = {}  # the last usage of each removed TaskManager cgroup
        self._tms: List[str] = []
        self._roots = list(dict.fromkeys((hierarchy.cpu, hierarchy.acct)))

    def _dirs(self, *parts: str) -> List[Path]:
        return [root.joinpath(BASE, self.name, *parts) for root in self._roots]

    def create(self) -> None:
        """The cluster's cgroup (and the shared parent); in v2 the cpu controller enabled for the
        children. CgroupError if this process may not make them."""
        sweep(self.hierarchy)
        try:
            for d in self._dirs():
                try:
                    d.mkdir(parents=True, exist_ok=True)
                except FileNotFoundError:  # another cluster's close removed the shared parent just then
                    d.mkdir(parents=True, exist_ok=True)
                if self.hierarchy.version == 2:
                    for level in (d.parent, d):
                        _write(level / "cgroup.subtree_control", "+cpu")
        except OSError as e:
            raise CgroupError(f"cannot make the cluster's cgroup under {self.hierarchy.cpu} ({e}); a CPU "
                              "limit per TaskManager needs a writable cgroup hierarchy (as root)") from None

    def add(self, tm: str) -> List[Path]:
        """The TaskManager's cgroup with its limit; returns the files its process writes its pid to."""
        dirs = self._dirs(tm)
        try:
            for d in dirs:
                d.mkdir(exist_ok=True)
            for name, content in limit_files(self.hierarchy.version, self.cores, self.period_us):
                _write(dirs[0] / name, content)
        except OSError as e:
            raise CgroupError(f"cannot limit {tm}'s cgroup {dirs[0]}: {e}") from None
        self._tms.append(tm)
        return [d / "cgroup.procs" for d in dirs]

    def usage(self, tm: str) -> Optional[Usage]:
        """The TaskManager cgroup's use so far (its last one once removed), None if it has none."""
        if tm not in self._tms:
            return self.final.get(tm)
        cpu_dir, acct_dir = self._dirs(tm)[0], self._dirs(tm)[-1]
        try:
            stat = (cpu_dir / "cpu.stat").read_text()
            acct = (acct_dir / "cpuacct.usage").read_text() if self.hierarchy.version == 1 else ""
        except OSError:
            return None
        return parse_usage(self.hierarchy.version, stat, acct)

    def remove(self, tm: str, timeout_s: float = 5.0) -> bool:
        """Removes a stopped TaskManager's cgroup (keeping its last usage); False if one stayed."""
        if tm not in self._tms:
            return True
        last = self.usage(tm)
        if last is not None:
            self.final[tm] = last
        self._tms.remove(tm)
        ok = all([_rmdir(d, timeout_s) for d in self._dirs(tm)])
        if not ok:
            log.warning("the cgroup of %s could not be removed: %s", tm, self._dirs(tm))
        return ok

    def close(self, timeout_s: float = 5.0) -> bool:
        """Removes every TaskManager's cgroup and the cluster's (and the shared parent if no other
        cluster uses it); False if one stayed."""
        ok = all([self.remove(tm, timeout_s) for tm in list(self._tms)])
        ok = all([_rmdir(d, timeout_s) for d in self._dirs()]) and ok
        for d in self._dirs():
            try:
                d.parent.rmdir()
            except OSError:  # another cluster's, or gone already
                pass
        return ok

    def paths(self) -> List[Path]:
        """The cluster's cgroup directories (one per hierarchy)."""
        return self._dirs()

    def record(self) -> dict:
        return {"version": self.hierarchy.version, "cpu_hierarchy": str(self.hierarchy.cpu),
                "cgroup": str(self._dirs()[0]), "cores": self.cores, "period_us": self.period_us,
                "quota_us": quota_us(self.cores, self.period_us)}


def sweep(hierarchy: Hierarchy) -> List[Path]:
    """Removes cluster cgroups whose controller has exited and that hold no process (left by a
    controller killed outright); returns what it removed."""
    removed = []
    for root in dict.fromkeys((hierarchy.cpu, hierarchy.acct)):
        base = root / BASE
        if not base.is_dir():
            continue
        for cluster in base.iterdir():
            pid = owner_pid(cluster.name)
            if not cluster.is_dir() or pid is None or _pid_alive(pid):
                continue
            children = [c for c in cluster.iterdir() if c.is_dir()]
            if any(_procs(c) for c in children) or _procs(cluster):
                continue
            if all([_rmdir(c, 0.0) for c in children]) and _rmdir(cluster, 0.0):
                removed.append(cluster)
    return removed
