"""Carries out a policy's actions on the live host pool, with the simulator's semantics
(testbed/sim/cluster.py): a migration starts the new copy and drains the old one once the copy
runs; a release waits until the host's instances have stopped, at the latest until its BTU end;
a watchdog replaces containers that died without being asked to stop. Every action, the
watchdog's replacements included, is recorded with its reason for the `actions` table."""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Dict, List, Mapping, Protocol, Sequence, Set, Tuple

from testbed.model import (
    NEW_HOST_PREFIX,
    Action,
    HostView,
    InstanceState,
    InstanceView,
    LeaseHost,
    OperatorType,
    Migrate,
    ProlongHost,
    ReleaseHost,
    ScaleDown,
    ScaleUp,
)
from testbed.sim.cluster import ActionRecord


class Pool(Protocol):
    """What the executor needs of testbed.live.hostpool.HostPool."""

    def lease(self, t: float, immediate: bool = False) -> str: ...

    def prolong(self, host_id: str) -> None: ...

    def release(self, host_id: str, t: float) -> None: ...

    def start_instance(self, operator: str, host_id: str, env: Mapping[str, str], t: float,
                       immediate: bool = False, volumes: Mapping[str, Mapping[str, str]] = ...) -> str: ...

    def stop_instance(self, instance_id: str) -> None: ...

    def host_views(self, t: float) -> Tuple[HostView, ...]: ...

    def instance_views(self) -> Tuple[InstanceView, ...]: ...

    def take_crashed(self) -> List[InstanceView]: ...


class LiveExecutor:
    def __init__(self, pool: Pool, types: Mapping[str, OperatorType], env_for: Callable[[str], Mapping[str, str]],
                 volumes_for: Callable[[str], Mapping[str, Mapping[str, str]]] = lambda _: {}):
        self.pool = pool
        self.types = types
        self.env_for = env_for  # operator -> container environment
        self.volumes_for = volumes_for  # operator -> bind mounts (e.g. where O9 writes its PDF reports)
        self.scalings: Dict[str, int] = {o: 0 for o in types}
        self.records: List[ActionRecord] = []
        self._migrations: Dict[str, str] = {}  # new copy -> old instance (stopped once the copy runs)
        self._releasing: Set[str] = set()

    # -- actions ---------------------------------------------------------------------------
    def apply(self, t: float, actions: Sequence[Action], immediate: bool = False) -> None:
        bound: Dict[str, str] = {}

        def resolve(ref: str) -> str:
            return bound[ref] if ref.startswith(NEW_HOST_PREFIX) else ref

        for a in actions:
            if isinstance(a, LeaseHost):
                host = self.pool.lease(t, immediate=immediate)
                bound[a.host] = host
                self._record(t, a, None, None, host, None)
            elif isinstance(a, ScaleUp):
                inst = self._start(t, a.operator, resolve(a.host), immediate)
                self.scalings[a.operator] += 1
                self._record(t, a, a.operator, inst, resolve(a.host), None)
            elif isinstance(a, ScaleDown):
                self.pool.stop_instance(a.instance)
                self.scalings[a.operator] += 1
                self._record(t, a, a.operator, a.instance, a.host, None)
            elif isinstance(a, Migrate):
                target = resolve(a.target)
                self._migrations[self._start(t, a.operator, target, immediate)] = a.instance
                self._record(t, a, a.operator, a.instance, a.host, target)
            elif isinstance(a, ProlongHost):
                self.pool.prolong(a.host)
                self._record(t, a, None, None, a.host, None)
            elif isinstance(a, ReleaseHost):
                host = resolve(a.host)
                self._releasing.add(host)
                self._record(t, a, None, None, host, None)
            else:  # pragma: no cover - the Action union is closed
                raise TypeError(f"unknown action {a!r}")
        self.progress(t)

    def _start(self, t: float, operator: str, host: str, immediate: bool = False) -> str:
        return self.pool.start_instance(operator, host, self.env_for(operator), t, immediate=immediate,
                                        volumes=self.volumes_for(operator))

    def _record(self, t: float, a: Action, operator, instance, host, target) -> None:
        self.records.append(ActionRecord(t, a.kind, operator, instance, host, target, a.reason))

    # -- between actions -------------------------------------------------------------------
    def progress(self, t: float) -> None:
        """Finish migrations whose copy runs and releases whose host is empty or out of paid time."""
        states = {i.id: i for i in self.pool.instance_views()}
        for new, old in list(self._migrations.items()):
            copy = states.get(new)
            if copy is None:  # the copy died before it ran: the watchdog replaces it, the old one stays
                del self._migrations[new]
            elif copy.state == InstanceState.running:
                del self._migrations[new]
                if old in states:
                    self.pool.stop_instance(old)
        if not self._releasing:
            return
        hosts = {h.id: h for h in self.pool.host_views(t)}
        for host in sorted(self._releasing):
            view = hosts.get(host)
            members = [i for i in states.values() if i.host == host]
            if view is None:
                self._releasing.discard(host)
            elif not members or t >= view.btu_end:
                self.pool.release(host, t)  # stops (drains) what is left, then gives the host back
                self._releasing.discard(host)

    def replace_crashed(self, t: float) -> None:
        """The watchdog: a container that died unasked is started again on its host."""
        for dead in self.pool.take_crashed():
            if dead.host in self._releasing:
                continue
            migrated_from = self._migrations.pop(dead.id, None)
            new = self._start(t, dead.operator, dead.host)
            if migrated_from is not None:
                self._migrations[new] = migrated_from
            self.records.append(ActionRecord(
                t, "replace", dead.operator, new, dead.host, None,
                f"watchdog: instance {dead.id} exited without being stopped; replaced by {new}"))

    # -- what the policy sees ----------------------------------------------------------------
    def replaced(self) -> Set[str]:
        """Migration sources: still serving until their copy runs, no longer counted or reserved."""
        return set(self._migrations.values())

    def views(self, t: float) -> Tuple[Tuple[HostView, ...], Tuple[InstanceView, ...]]:
        replaced = self.replaced()
        freed: Dict[str, Tuple[int, int]] = {}  # host -> reservations of its migration sources
        instances = []
        for i in self.pool.instance_views():
            if i.id in replaced and i.state != InstanceState.draining:
                cpu, mem = freed.get(i.host, (0, 0))
                freed[i.host] = (cpu + self.types[i.operator].cpu, mem + self.types[i.operator].memory)
                i = replace(i, state=InstanceState.draining)
            instances.append(i)
        hosts = tuple(
            replace(h, cpu_free=h.cpu_free + freed.get(h.id, (0, 0))[0],
                    memory_free=h.memory_free + freed.get(h.id, (0, 0))[1],
                    releasing=h.releasing or h.id in self._releasing)
            for h in self.pool.host_views(t)
        )
        return hosts, tuple(instances)
