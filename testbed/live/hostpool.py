"""The live host pool: logical hosts (leased VMs) on one or more Docker engines, operator instances
as containers on them.

Accounting is the simulator's (testbed/leasing.py): a lease pays per started BTU, `prolong` pays one
more in advance, the `leases` table is built by the same function. A host becomes ready after a
lease delay drawn from a seeded stream; the first start of an operator type on a host waits for an
emulated image pull (image_mb / pull_mb_per_s), because hosts sharing one engine share its real
image store. Docker calls run in background threads so that the control loop never blocks on them:
`start_instance` and `stop_instance` return at once, and the instance states say how far they got.

`PoolBook` is the bookkeeping without I/O (unit-tested with explicit times); `HostPool` adds the
engines, the containers and the threads.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import docker.errors
import numpy as np
import requests
from docker import DockerClient

from testbed.billing import price_per_btu
from testbed.config import ExperimentConfig, InfrastructureConfig
from testbed.leasing import Host, leases_table
from testbed.live.engines import (
    HOST_LABEL,
    INSTANCE_LABEL,
    OPERATOR_LABEL,
    ROLE_LABEL,
    RUN_LABEL,
    ContainerSpec,
    EngineError,
    check_cgroup_support,
    connect,
    container_name,
    docker_name,
    missing_images,
    reap_orphans,
    run_holder,
)
from testbed.live_config import EngineConfig, LiveConfig
from testbed.model import HostView, InstanceState, InstanceView, OperatorType
from testbed.rng import stream
from testbed.topology import Topology

log = logging.getLogger(__name__)


class PoolError(RuntimeError):
    """A request the pool cannot carry out: no free host slot, unknown or released host."""


@dataclass
class LiveHost(Host):
    engine: str = ""  # URL of the Docker engine this logical host lives on


@dataclass
class LiveInstance:
    id: str  # also the container name
    operator: str
    host: str
    engine: str
    requested_at: float
    create_at: float  # host booted and image pulled: the container may be created
    state: InstanceState = InstanceState.starting
    created_at: Optional[float] = None  # `docker run` requested
    running_at: Optional[float] = None
    stop_requested_at: Optional[float] = None
    exited_at: Optional[float] = None
    exit_code: Optional[int] = None
    crashed: bool = False
    error: Optional[str] = None  # start failure, or the log tail of a crashed container

    def view(self) -> InstanceView:
        return InstanceView(self.id, self.operator, self.host, self.state, self.requested_at)


@dataclass(frozen=True)
class InstanceRecord:
    """The life of one instance, for benchmarks and reports (times on the pool's clock)."""

    id: str
    operator: str
    host: str
    engine: str
    requested_at: float
    running_at: Optional[float]
    start_latency_s: Optional[float]  # request -> running, including host boot and emulated pull
    container_start_s: Optional[float]  # `docker run` -> running: the engine's own start latency
    stop_requested_at: Optional[float]
    exited_at: Optional[float]
    drain_s: Optional[float]  # stop requested -> container gone
    exit_code: Optional[int]
    crashed: bool
    error: Optional[str]


def _record(i: LiveInstance) -> InstanceRecord:
    def span(a: Optional[float], b: Optional[float]) -> Optional[float]:
        return None if a is None or b is None else b - a

    return InstanceRecord(
        id=i.id, operator=i.operator, host=i.host, engine=i.engine, requested_at=i.requested_at,
        running_at=i.running_at, start_latency_s=span(i.requested_at, i.running_at),
        container_start_s=span(i.created_at, i.running_at), stop_requested_at=i.stop_requested_at,
        exited_at=i.exited_at, drain_s=span(i.stop_requested_at, i.exited_at), exit_code=i.exit_code,
        crashed=i.crashed, error=i.error,
    )


class PoolBook:
    """Hosts, instances and leases of the pool, without I/O: every method takes the time."""

    def __init__(self, infra: InfrastructureConfig, engines: Sequence[EngineConfig], types: Mapping[str, OperatorType],
                 btu_s: float, price: float, rng: np.random.Generator, run_id: str, emulate_pull: bool = True):
        if not engines:
            raise PoolError("backend.live.engines: no Docker engine configured")
        self.infra = infra
        self.engines = list(engines)
        self.types = dict(types)
        self.btu_s = btu_s
        self.price = price
        self.rng = rng
        self.run_id = run_id
        self.emulate_pull = emulate_pull
        self.hosts: Dict[str, LiveHost] = {}  # leased, not yet released
        self.retired: List[LiveHost] = []
        self.instances: Dict[str, LiveInstance] = {}  # starting, running, draining
        self.finished: List[LiveInstance] = []  # stopped or crashed
        self._host_seq = 0
        self._instance_seq = 0

    # -- hosts -----------------------------------------------------------------------------
    def lease(self, t: float, immediate: bool = False) -> LiveHost:
        """Lease a host on the first engine with a free slot; ready after the lease delay."""
        if len(self.hosts) >= self.infra.max_hosts:
            raise PoolError(f"infrastructure.max_hosts: all {self.infra.max_hosts} hosts are leased")
        used: Dict[str, int] = {}
        for h in self.hosts.values():
            used[h.engine] = used.get(h.engine, 0) + 1
        engine = next((e for e in self.engines if used.get(e.url, 0) < e.max_hosts), None)
        if engine is None:
            slots = ", ".join(f"{e.url} ({e.max_hosts})" for e in self.engines)
            raise PoolError(f"backend.live.engines: every engine is full: {slots}")
        low, high = self.infra.lease_delay_s
        ready = t if immediate else t + float(self.rng.uniform(low, high))
        self._host_seq += 1
        host = LiveHost(f"vm{self._host_seq}", self.infra.host_cpu_shares, self.infra.host_memory_mb, t, ready,
                        t + self.btu_s, engine=engine.url)
        self.hosts[host.id] = host
        return host

    def host(self, host_id: str) -> LiveHost:
        try:
            return self.hosts[host_id]
        except KeyError:
            raise PoolError(f"host {host_id!r} is not leased") from None

    def prolong(self, host_id: str) -> None:
        self.host(host_id).prolong(self.btu_s)

    def release(self, t: float, host_id: str) -> List[str]:
        """Mark the host releasing; returns the instances still to stop. The lease ends when the
        last of them is gone (now, if there are none)."""
        host = self.host(host_id)
        host.releasing = True
        if not host.instances:
            self._close(t, host)
        return [i for i in host.instances if self.instances[i].state != InstanceState.draining]

    def _close(self, t: float, host: LiveHost) -> None:
        if host.release(t):
            del self.hosts[host.id]
            self.retired.append(host)

    # -- instances -------------------------------------------------------------------------
    def place(self, t: float, operator: str, host_id: str, immediate: bool = False) -> LiveInstance:
        """Record a start request; the container may be created at `create_at` (host booted, image
        pulled). `immediate` (the initial deployment) treats the image as already there."""
        if operator not in self.types:
            raise PoolError(f"unknown operator {operator!r}")
        host = self.host(host_id)
        if host.releasing:
            raise PoolError(f"host {host_id} is being released")
        begin = max(t, host.ready_at)
        if immediate or not self.emulate_pull:
            host.images.setdefault(operator, begin)
            create_at = max(begin, host.images[operator])
        else:
            create_at = host.image_ready(operator, begin, self.types[operator].image_mb / self.infra.pull_mb_per_s)
        self._instance_seq += 1
        inst = LiveInstance(container_name(self.run_id, operator, self._instance_seq), operator, host.id, host.engine,
                            t, create_at)
        self.instances[inst.id] = inst
        host.instances.append(inst.id)
        return inst

    def mark_created(self, t: float, instance_id: str) -> None:
        self.instances[instance_id].created_at = t

    def mark_running(self, t: float, instance_id: str) -> None:
        inst = self.instances[instance_id]
        if inst.state == InstanceState.starting:
            inst.state = InstanceState.running
            inst.running_at = t

    def mark_draining(self, t: float, instance_id: str) -> bool:
        """Returns False when the instance is already draining (a second stop is a no-op)."""
        inst = self.instances[instance_id]
        if inst.state == InstanceState.draining:
            return False
        inst.state = InstanceState.draining
        inst.stop_requested_at = t
        return True

    def gone(self, t: float, instance_id: str, exit_code: Optional[int] = None, crashed: bool = False,
             error: Optional[str] = None) -> LiveInstance:
        """The instance's container has exited (asked to or not) and is no longer counted."""
        inst = self.instances.pop(instance_id)
        inst.exited_at, inst.exit_code, inst.crashed, inst.error = t, exit_code, crashed, error
        self.finished.append(inst)
        host = self.hosts.get(inst.host)
        if host is not None:
            host.instances.remove(instance_id)
            if host.releasing and not host.instances:
                self._close(t, host)
        return inst

    # -- views -----------------------------------------------------------------------------
    def host_views(self, t: float) -> Tuple[HostView, ...]:
        """Draining instances hold no reservation (testbed/model.py HostView)."""
        return tuple(
            h.view(t, (self.types[self.instances[i].operator] for i in h.instances
                       if self.instances[i].state != InstanceState.draining), self.price)
            for h in self.hosts.values()
        )

    def instance_views(self) -> Tuple[InstanceView, ...]:
        return tuple(i.view() for i in self.instances.values())

    def leases(self, end_s: float) -> Dict[str, list]:
        return leases_table(self.retired + list(self.hosts.values()), self.btu_s, end_s)

    def records(self) -> Tuple[InstanceRecord, ...]:
        return tuple(_record(i) for i in sorted(self.finished + list(self.instances.values()),
                                                 key=lambda i: (i.requested_at, i.id)))


def image_for(live: LiveConfig, operator: str) -> str:
    return f"{live.image_prefix}{operator.lower()}:{live.image_tag}"


@dataclass(frozen=True)
class CrashRecord:
    instance: InstanceView
    t: float
    exit_code: Optional[int]
    error: Optional[str]


@dataclass
class _Ops:
    """Per-instance thread state: the start attempt, its cancellation and its container."""

    cancel: threading.Event = field(default_factory=threading.Event)
    start: Optional[threading.Thread] = None
    container: Any = None  # docker.models.containers.Container once created


class HostPool:
    """Logical hosts on Docker engines. All times are on `clock` (seconds since the run started,
    advancing at wall-clock rate: background threads wait on it for boot and pull delays)."""

    LOG_TAIL = 20  # lines of a crashed container's output kept in its record

    def __init__(self, cfg: ExperimentConfig, run_id: str, clock: Callable[[], float],
                 rng: Optional[np.random.Generator] = None):
        live = cfg.backend.live
        self.live = live
        self.run_id = run_id
        self.clock = clock
        topology = Topology.from_config(cfg.topology)
        btu_s = cfg.billing.btu_minutes * 60.0
        self.book = PoolBook(
            cfg.infrastructure, live.engines, topology.types, btu_s,
            price_per_btu(cfg.billing.btu_minutes, cfg.billing.price_per_10_minutes),
            rng if rng is not None else stream(cfg.seed, "live.hostpool"), run_id, live.emulate_pull,
        )
        self.images = {o: image_for(live, o) for o in topology.operators}
        self._lock = threading.RLock()
        self._clients: Dict[str, DockerClient] = {}
        self._ops: Dict[str, _Ops] = {}
        self._threads: Set[threading.Thread] = set()
        self._new_crashes: List[InstanceView] = []
        self._crashes: List[CrashRecord] = []
        self._closed = False
        # slowest observed service time of an operator (s); the live run sets it from its monitor
        self.service_bound_s: Callable[[str], float] = lambda operator: 0.0
        self._checked = False
        self.reaped: Dict[str, List[str]] = {}  # per engine: containers of killed runs removed at the start
        # cgroup_parent: per logical host, the cgroup its instances nest in (made on its first start)
        self._parents: Dict[str, str] = {}
        self._parent_locks: Dict[str, threading.Lock] = {}

    # -- engines ---------------------------------------------------------------------------
    def check_engines(self) -> None:
        """Ping every engine and check it has every operator image; raises EngineError naming the
        engine and what is missing. Runs before the first lease."""
        images = sorted(set(self.images.values()))
        clients: Dict[str, DockerClient] = {}
        for engine in self.book.engines:
            client = connect(engine.url)
            clients[engine.url] = client
            self.reaped[engine.url] = reap_orphans(client)
            if self.live.cgroup_parent:
                check_cgroup_support(client, engine.url)
            missing = missing_images(client, images)
            if missing:
                raise EngineError(engine.url, f"missing operator image(s) {', '.join(missing)} "
                                              f"(build them there, e.g. infra/images.sh)")
        self._clients = clients
        self._checked = True

    def _client(self, url: str) -> DockerClient:
        if url not in self._clients:
            self._clients[url] = connect(url)
        return self._clients[url]

    # -- hosts -----------------------------------------------------------------------------
    def lease(self, t: Optional[float] = None, immediate: bool = False) -> str:
        if not self._checked:
            self.check_engines()  # an unreachable engine fails here, before anything is leased
        with self._lock:
            return self.book.lease(self._t(t), immediate).id

    def prolong(self, host_id: str) -> None:
        with self._lock:
            self.book.prolong(host_id)

    def release(self, host_id: str, t: Optional[float] = None) -> None:
        """Give the host back: its remaining instances drain first; the lease ends when they are gone."""
        with self._lock:
            to_stop = self.book.release(self._t(t), host_id)
        self._drop_parent_if_released(host_id)
        for ident in to_stop:
            self.stop_instance(ident)

    # -- instances -------------------------------------------------------------------------
    def start_instance(self, operator: str, host_id: str, env: Mapping[str, str], t: Optional[float] = None,
                       immediate: bool = False, volumes: Optional[Mapping[str, Mapping[str, str]]] = None) -> str:
        """Request an instance; returns its id at once. The container is created in the background
        once the host is ready and the image pulled; the state turns running when Docker says so."""
        if self._closed:
            raise PoolError("the host pool has been cleaned up")
        with self._lock:
            inst = self.book.place(self._t(t), operator, host_id, immediate)
            cfg = self.book.types[operator]
            spec = ContainerSpec(
                name=inst.id, image=self.images[operator],
                environment={**env, "INSTANCE_ID": inst.id},
                labels={RUN_LABEL: self.run_id, HOST_LABEL: inst.host, OPERATOR_LABEL: operator,
                        INSTANCE_LABEL: inst.id},
                cpu_shares=cfg.cpu, memory_mb=cfg.memory, network_mode=self.live.network_mode,
                volumes=volumes or {},
            )
            ops = _Ops()
            self._ops[inst.id] = ops
            ops.start = self._spawn(self._start_worker, inst.id, inst.host, inst.engine, inst.create_at, spec, ops)
        return inst.id

    def stop_instance(self, instance_id: str) -> None:
        """Graceful stop: SIGTERM, up to `drain_timeout_s` to drain, then SIGKILL; the instance is
        draining until its container is gone. Unknown or already stopping instances are ignored."""
        with self._lock:
            if instance_id not in self.book.instances or not self.book.mark_draining(self.clock(), instance_id):
                return
            ops = self._ops[instance_id]
            ops.cancel.set()
        self._spawn(self._stop_worker, instance_id, ops)

    def _start_worker(self, ident: str, host: str, engine: str, create_at: float, spec: ContainerSpec,
                      ops: _Ops) -> None:
        delay = create_at - self.clock()
        if delay > 0 and ops.cancel.wait(delay):
            return  # stopped before the container existed; the stop worker finishes the books
        try:
            if self.live.cgroup_parent and not ops.cancel.is_set():
                spec = replace(spec, cgroup_parent=self._parent(host, engine, spec.image))
        except (docker.errors.DockerException, EngineError, PoolError) as exc:
            self._crash(ident, None, f"start failed: the host's cgroup holder: {exc}")
            return
        with self._lock:
            if ops.cancel.is_set() or self._closed:
                return
            self.book.mark_created(self.clock(), ident)
        try:
            container = spec.run(self._client(engine))
            container.reload()
        except (docker.errors.DockerException, EngineError, PoolError, requests.exceptions.RequestException) as exc:
            # the engine may have created (and started) the container after all: never leave it
            # running unaccounted for; the watchdog replaces the instance
            self._remove_named(engine, spec.name)
            self._crash(ident, None, f"start failed: {exc!r}")
            return
        ops.container = container
        if self._closed:  # cleanup ran while the container was being created
            self._remove(container)
            return
        with self._lock:
            if ops.cancel.is_set():
                return  # the stop worker takes over
            if container.status == "running":
                self.book.mark_running(self.clock(), ident)
                return
        self._crash(ident, container, f"exited during start (status {container.status})")

    def _stop_worker(self, ident: str, ops: _Ops) -> None:
        if ops.start is not None:
            ops.start.join()
        exit_code, error = None, None
        container = ops.container
        if container is not None:
            try:
                operator = self.book.instances[ident].operator
                self._terminate(container, lambda: self.drain_timeout_s(operator))
                container.reload()
                exit_code = int(container.attrs["State"]["ExitCode"])
            except docker.errors.NotFound:
                error = "container vanished while stopping"
            except docker.errors.DockerException as exc:
                error = f"stop failed: {exc}"
            self._remove(container)
        with self._lock:
            host = self.book.instances[ident].host if ident in self.book.instances else None
            if host is not None:
                self.book.gone(self.clock(), ident, exit_code=exit_code, error=error)
        if host is not None:
            self._drop_parent_if_released(host)

    def drain_timeout_s(self, operator: str) -> float:
        """How long a stopping instance may drain before it is killed: what it can still hold in
        process (it hands back what it has not started) at the slowest service time seen so far in
        the run, three times over for a loaded machine, plus `stop_timeout_s` for its confirms,
        metrics flush and exit. A slow machine shows slow service times, so the bound grows with it;
        and when more instances stop at once than the machine has cores (a run's end stops them all),
        each exit waits for a core: the exit allowance grows with the instances per core."""
        with self._lock:
            stopping = sum(1 for i in self.book.instances.values()
                           if i.stop_requested_at is not None and i.exited_at is None)
        per_core = max(1.0, stopping / float(os.cpu_count() or 1))
        return self.live.stop_timeout_s * per_core + 3.0 * self.live.parallel * max(0.0, self.service_bound_s(operator))

    def _terminate(self, container: Any, timeout_s: Callable[[], float]) -> None:
        """SIGTERM until the container exits, SIGKILL once it has had `timeout_s()` (read again each
        second: it grows while other instances begin to stop). The image starts the runner with
        SIGTERM ignored until its handler is installed (operators/Dockerfile), so a stop that comes
        during start-up is not lost and not fatal: it is repeated every second instead."""
        start = time.monotonic()
        while True:
            try:
                container.kill(signal="SIGTERM")
            except docker.errors.APIError as exc:
                if exc.status_code != 409:  # 409: not running any more
                    raise
                return
            deadline = start + timeout_s()
            try:
                container.wait(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
                return
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                pass
            if time.monotonic() >= deadline:
                try:
                    container.kill()
                    container.wait(timeout=60)
                except docker.errors.APIError as exc:
                    if exc.status_code != 409:
                        raise
                return

    def _crash(self, ident: str, container: Any, reason: str) -> None:
        """An instance ended without being asked to: record it for the watchdog, remove the container."""
        exit_code, tail = None, reason
        if container is not None:
            try:
                container.reload()
                exit_code = int(container.attrs["State"]["ExitCode"])
                logs = container.logs(tail=self.LOG_TAIL).decode(errors="replace").strip()
                tail = (f"{reason}; exit code {exit_code}; last output:\n{logs}" if logs
                        else f"{reason}; exit code {exit_code}")
            except docker.errors.DockerException:
                pass
        with self._lock:
            inst = self.book.instances.get(ident)
            if inst is None or inst.state == InstanceState.draining:
                return  # a stop was requested meanwhile: not a crash
            view = inst.view()
            t = self.clock()
            self.book.gone(t, ident, exit_code=exit_code, crashed=True, error=tail)
            self._new_crashes.append(view)
            self._crashes.append(CrashRecord(view, t, exit_code, tail))
        log.warning("instance %s on %s crashed: %s", ident, view.host, tail)
        if container is not None:
            self._remove(container)
        self._drop_parent_if_released(view.host)

    def _parent(self, host: str, engine: str, image: str) -> str:
        """The host's cgroup parent, starting its holder on first use (one per host, whichever
        instance gets here first)."""
        with self._lock:
            lock = self._parent_locks.setdefault(host, threading.Lock())
        with lock:
            if host not in self._parents:
                with self._lock:
                    h = self.book.host(host)
                    cpu, memory = h.cpu, h.memory
                if self._closed:
                    raise PoolError("the host pool has been cleaned up")
                client = self._client(engine)
                parent = run_holder(client, docker_name(self.run_id, host), image,
                                    {RUN_LABEL: self.run_id, HOST_LABEL: host}, cpu, memory)
                if self._closed:  # cleanup ran meanwhile and may have missed it
                    self._remove(client.containers.get(parent.rsplit("/", 1)[-1]))
                    raise PoolError("the host pool has been cleaned up")
                self._parents[host] = parent
            return self._parents[host]

    def _drop_parent_if_released(self, host: str) -> None:
        """Remove a released host's holder (its instances are gone, so its cgroup is empty)."""
        with self._lock:
            if host in self.book.hosts or host not in self._parents:
                return
            parent = self._parents.pop(host)
            engine = next(h.engine for h in self.book.retired if h.id == host)
        try:
            self._remove(self._client(engine).containers.get(parent.rsplit("/", 1)[-1]))
        except (docker.errors.DockerException, EngineError) as exc:
            log.error("could not remove the holder of host %s: %s", host, exc)

    def refresh(self) -> None:
        """Reconcile with Docker: a running instance whose container exited, died or vanished
        without a stop request is reported as crashed (take_crashed)."""
        with self._lock:
            running = {i.id: i.engine for i in self.book.instances.values() if i.state == InstanceState.running}
        if not running:
            return
        found: Dict[str, Any] = {}
        for url in sorted(set(running.values())):
            for c in self._run_containers(self._client(url)):
                found[(c.attrs.get("Labels") or {}).get(INSTANCE_LABEL, "")] = c
        for ident in running:
            c = found.get(ident)
            if c is None:
                self._crash(ident, None, "container vanished")
            elif c.status in ("exited", "dead"):
                self._crash(ident, c, f"container {c.status}")

    def take_crashed(self) -> List[InstanceView]:
        """Instances that crashed since the last call (each reported once, for the watchdog)."""
        with self._lock:
            out, self._new_crashes = self._new_crashes, []
        return out

    def crashed(self) -> List[CrashRecord]:
        """Every crash so far, with exit code and the container's last output."""
        with self._lock:
            return list(self._crashes)

    # -- views -----------------------------------------------------------------------------
    def host_views(self, t: Optional[float] = None) -> Tuple[HostView, ...]:
        with self._lock:
            return self.book.host_views(self._t(t))

    def instance_views(self) -> Tuple[InstanceView, ...]:
        with self._lock:
            return self.book.instance_views()

    def leases(self, end_t: float) -> Dict[str, list]:
        """The event log's `leases` table (the simulator's accounting)."""
        with self._lock:
            return self.book.leases(end_t)

    def records(self) -> Tuple[InstanceRecord, ...]:
        """Every instance so far with its start latency, drain time and exit."""
        with self._lock:
            return self.book.records()

    def image_digests(self) -> Dict[str, Dict[str, str]]:
        """Image id per operator image on each engine (the run manifest records them)."""
        return {url: {image: client.images.get(image).id for image in sorted(set(self.images.values()))}
                for url, client in sorted(self._clients.items())}

    def engine_details(self) -> List[Dict[str, Any]]:
        """Per engine its URL, CPU count (the manifest records them: the cores the logical hosts
        on one engine share, which a profile measured from the run needs; None if the engine does
        not say) and the containers of killed runs it removed at the start."""
        out = []
        for url, client in sorted(self._clients.items()):
            try:
                cpus = client.info().get("NCPU")
            except docker.errors.DockerException as exc:
                log.warning("engine %s: no CPU count (%s)", url, exc)
                cpus = None
            out.append({"url": url, "cpus": int(cpus) if cpus else None,
                        "orphans_removed": self.reaped.get(url, [])})
        return out

    def host_engine(self, host_id: str) -> str:
        with self._lock:
            return self.book.host(host_id).engine

    # -- shutdown --------------------------------------------------------------------------
    def wait_idle(self, timeout_s: float = 60.0) -> bool:
        """Wait for pending starts and stops; returns False if some were still busy at the timeout."""
        deadline = time.monotonic() + timeout_s  # wall time: the pool's clock may be a test's
        while True:
            with self._lock:
                busy = [th for th in self._threads if th.is_alive()]
            if not busy:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            busy[0].join(min(remaining, 1.0))

    def cleanup(self) -> int:
        """Remove every container of this run (found by label) on every engine, whatever the books
        say; idempotent and lock-free, so a signal handler or `finally` may call it. Returns how many
        containers were removed; an unreachable engine is logged, not raised."""
        self._closed = True
        for ops in list(self._ops.values()):
            ops.cancel.set()
        removed = 0
        for engine in self.book.engines:
            try:
                client = self._clients.get(engine.url) or connect(engine.url)
                containers = self._run_containers(client)
            except (EngineError, docker.errors.DockerException) as exc:
                log.error("cleanup of run %s on %s failed: %s", self.run_id, engine.url, exc)
                continue
            # instances before holders: a holder's cgroup is the parent of its instances' cgroups
            for c in sorted(containers, key=lambda c: ROLE_LABEL in (c.attrs.get("Labels") or {})):
                removed += self._remove(c)
        return removed

    # -- helpers ---------------------------------------------------------------------------
    def _t(self, t: Optional[float]) -> float:
        return self.clock() if t is None else t

    def _spawn(self, target: Callable[..., Any], *args: Any) -> threading.Thread:
        th = threading.Thread(target=target, args=args, daemon=True, name=f"hostpool-{target.__name__}")
        with self._lock:
            self._threads = {x for x in self._threads if x.is_alive()}
            self._threads.add(th)
        th.start()
        return th

    def _run_containers(self, client: DockerClient) -> list:
        # sparse: the list call alone, no inspect per container that a concurrent removal could break
        return client.containers.list(all=True, sparse=True, filters={"label": f"{RUN_LABEL}={self.run_id}"})

    def _remove_named(self, engine: str, name: str) -> None:
        try:
            self._remove(self._client(engine).containers.get(name))
        except (docker.errors.DockerException, EngineError, requests.exceptions.RequestException):
            pass  # not there, or the engine away: cleanup removes the run's containers by label

    @staticmethod
    def _remove(container: Any) -> int:
        try:
            container.remove(force=True)
            return 1
        except docker.errors.NotFound:
            return 0
        except docker.errors.APIError as exc:
            if exc.status_code == 409:  # removal already in progress
                return 0
            log.error("could not remove container %s: %s", getattr(container, "name", "?"), exc)
            return 0
