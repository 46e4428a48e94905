"""Docker engines of the live host pool: connecting (unix://, tcp://, ssh:// URLs), the start-up
check (reachable, operator images present), and the container an operator instance runs in."""
from __future__ import annotations

import functools
import logging
import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Mapping, Optional, Sequence

import docker
import docker.errors
from docker import DockerClient

# Labels every container of a run carries; cleanup() finds a run's containers by RUN_LABEL alone.
RUN_LABEL = "testbed.run"
HOST_LABEL = "testbed.host"
OPERATOR_LABEL = "testbed.operator"
INSTANCE_LABEL = "testbed.instance"
# The process that runs the container's run: `<machine>/<pid>/<start time in clock ticks>`. A run's
# own cleanup removes its containers, but a process killed outright (SIGKILL, a lost terminal) cannot;
# the next run on the engine removes what such a process left (reap_orphans).
OWNER_LABEL = "testbed.owner"

log = logging.getLogger(__name__)


@functools.cache  # fixed for the process's life: read once, not per container
def _machine() -> str:
    try:
        return Path("/etc/machine-id").read_text().strip() or socket.gethostname()
    except OSError:
        return socket.gethostname()


def _start_ticks(pid: int) -> Optional[str]:
    """When the process started (clock ticks since boot): with the pid, it names one process even
    after its pid is reused. None when no such process runs."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def owner(pid: Optional[int] = None) -> str:
    """The owner label's value for process `pid` (default: this one) on this machine."""
    return _own_label(os.getpid()) if pid is None else f"{_machine()}/{pid}/{_start_ticks(pid)}"


@functools.cache  # keyed on the pid: a forked child gets its own
def _own_label(pid: int) -> str:
    return f"{_machine()}/{pid}/{_start_ticks(pid)}"


def owner_gone(label: str) -> bool:
    """Whether the process an owner label names is known to be gone: it ran on this machine and no
    process with its pid and start time runs. An owner on another machine is not known to be gone."""
    try:
        machine, pid, ticks = label.rsplit("/", 2)
        return machine == _machine() and _start_ticks(int(pid)) != ticks
    except ValueError:
        return False  # not a label this code wrote: leave the container alone


def reap_orphans(client: DockerClient) -> List[str]:
    """Remove the containers of runs whose process on this machine is gone; returns their names."""
    removed = []
    for c in client.containers.list(all=True, sparse=True, filters={"label": OWNER_LABEL}):
        label = (c.attrs.get("Labels") or {}).get(OWNER_LABEL, "")
        if owner_gone(label):
            try:
                c.remove(force=True)
                removed.append(c.attrs.get("Names", [c.id])[0].lstrip("/"))
            except docker.errors.NotFound:
                pass  # removed meanwhile
            except docker.errors.APIError as exc:
                log.warning("cannot remove the orphaned container %s: %s", c.id[:12], exc)
    if removed:
        log.warning("removed %d container(s) left by a run whose process is gone: %s", len(removed),
                    ", ".join(sorted(removed)))
    return removed


class EngineError(RuntimeError):
    """A Docker engine is unreachable or lacks an operator image; the message names the engine URL."""

    def __init__(self, url: str, message: str):
        super().__init__(f"Docker engine {url}: {message}")
        self.url = url


# How long one engine API call may take: a container's create or start on a loaded machine takes
# seconds and has been seen beyond 10 s on two busy cores; an unreachable engine fails at once.
API_TIMEOUT_S = 120.0


def connect(url: str, timeout_s: float = API_TIMEOUT_S) -> DockerClient:
    """A client of the engine at `url`; raises EngineError when it does not answer.
    ssh:// URLs go through the ssh binary (the user's ssh config and keys), not paramiko."""
    try:
        client = docker.DockerClient(base_url=url, timeout=int(max(1, timeout_s)), use_ssh_client=url.startswith("ssh://"))
        client.ping()
    except docker.errors.DockerException as exc:
        raise EngineError(url, f"not reachable ({exc})") from exc
    except OSError as exc:  # ssh client or socket failures outside the SDK's own exceptions
        raise EngineError(url, f"not reachable ({exc})") from exc
    return client


def missing_images(client: DockerClient, images: Sequence[str]) -> List[str]:
    out = []
    for image in images:
        try:
            client.images.get(image)
        except docker.errors.ImageNotFound:
            out.append(image)
    return out


def docker_name(*parts: object) -> str:
    """The parts joined by '-' in lower case, with characters Docker rejects replaced by '-'."""
    name = re.sub(r"[^a-z0-9_.-]", "-", "-".join(str(p) for p in parts).lower())
    return name if name[0].isalnum() else f"x{name}"


def container_name(run_id: str, operator: str, n: int) -> str:
    """An instance's container: `<run_id>-<operator>-<n>`."""
    return docker_name(run_id, operator, n)


@dataclass(frozen=True)
class ContainerSpec:
    """Everything `docker run` needs for one operator instance."""

    name: str
    image: str
    environment: Mapping[str, str]
    labels: Mapping[str, str]
    cpu_shares: int  # relative CPU weight, 1024 = one core (docs/papers/btu-provisioning.md#operators)
    memory_mb: int  # soft reservation, no hard limit (VISP behaviour)
    network_mode: str
    cgroup_parent: str = ""  # the logical host's cgroup (HostHolder), "" = the engine's default
    volumes: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # host path -> {bind, mode}

    def run(self, client: DockerClient) -> Any:
        """Create and start the container (detached); returns the SDK's Container."""
        return client.containers.run(
            # no init process: the image's own process is PID 1, and the kernel drops a signal sent to a
            # namespace's PID 1 that has no handler for it. A stop during start-up is then neither fatal
            # nor lost (the pool repeats its SIGTERM until the handler is there). With a forwarding init,
            # the SIGTERM reached the entrypoint's shell before its `trap '' TERM` ran on a loaded machine
            # and ended the instance with 143.
            self.image, detach=True, init=False, name=self.name, environment=dict(self.environment),
            labels={**self.labels, OWNER_LABEL: owner()},
            cpu_shares=self.cpu_shares, mem_reservation=f"{self.memory_mb}m", network_mode=self.network_mode,
            cgroup_parent=self.cgroup_parent or None, volumes={k: dict(v) for k, v in self.volumes.items()} or None,
        )


ROLE_LABEL = "testbed.role"
HOLDER_ROLE = "host"


def check_cgroup_support(client: DockerClient, url: str) -> None:
    """Per-host cgroup parents nest containers below a holder container's cgroup, which needs the
    cgroupfs driver on cgroup v1 (v2 forbids processes in a cgroup whose children get controllers)."""
    info = client.info()
    driver, version = info.get("CgroupDriver"), str(info.get("CgroupVersion", "1"))
    if driver != "cgroupfs" or version != "1":
        raise EngineError(url, f"backend.live.cgroup_parent needs the cgroupfs driver on cgroup v1, "
                               f"the engine has {driver} on cgroup v{version}")


def run_holder(client: DockerClient, name: str, image: str, labels: Mapping[str, str], cpu_shares: int,
               memory_mb: int) -> str:
    """Start a logical host's holder: an idle container whose cgroup carries the host's CPU (as a
    quota of cpu_shares/1024 cores) and memory limit; instance containers nest below it. Returns the
    cgroup parent for them (cgroupfs puts a container's cgroup at /docker/<id>)."""
    holder = client.containers.run(
        image, detach=True, name=name, labels={**labels, ROLE_LABEL: HOLDER_ROLE, OWNER_LABEL: owner()},
        entrypoint=["python3", "-c", "import signal; signal.pause()"], network_mode="none",
        nano_cpus=int(cpu_shares / 1024 * 1e9), mem_limit=f"{memory_mb}m",
    )
    return f"/docker/{holder.id}"

