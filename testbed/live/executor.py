"""Carries out a policy's actions on the live host pool, with the simulator's semantics
(testbed/sim/cluster.py): a migration starts the new copy and drains the old one once the copy
runs; a release waits until the host's instances have stopped, at the latest until its BTU end;
a watchdog replaces containers that died without being asked to stop. Every action, the
watchdog's replacements included, is recorded with its reason for the `actions` table."""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Dict, List, Mapping, Optional, Protocol, Sequence, Set, Tuple

from data_provider.source_gate import SourceGate
from testbed.actions import ActionRecord, dispatch
from testbed.model import Action, HostView, InstanceState, InstanceView, OperatorType


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


class Switchboard(Protocol):
    """Pool activation and queue purges on the broker side (testbed.live.switchboard)."""

    def set_active(self, instance: str, active: bool) -> None: ...

    def purge(self, entry: bool = True) -> Tuple[Dict[str, int], Dict[str, int]]: ...  # purged, kept


class LiveExecutor:
    """The live `testbed.actions.ActionTarget`."""

    def __init__(self, pool: Pool, types: Mapping[str, OperatorType], env_for: Callable[[str], Mapping[str, str]],
                 volumes_for: Callable[[str], Mapping[str, Mapping[str, str]]] = lambda _: {},
                 switchboard: Optional[Switchboard] = None):
        self.pool = pool
        self.types = types
        self.env_for = env_for  # operator -> container environment
        self.volumes_for = volumes_for  # operator -> bind mounts (e.g. where O9 writes its PDF reports)
        self.switchboard = switchboard
        self.scalings: Dict[str, int] = {o: 0 for o in types}
        self.records: List[ActionRecord] = []
        self._migrations: Dict[str, str] = {}  # new copy -> old instance (stopped once the copy runs)
        self._releasing: Set[str] = set()
        self._inactive: Set[str] = set()  # pool members switched off
        self._paused_until: Optional[float] = None  # a restart's downtime
        self._purged: Dict[str, int] = {}  # items purged by restarts since the last take_purged()
        self.purged_total: Dict[str, int] = {}  # items purged by restarts in the whole run (accounting)
        self.source_gate: Optional[SourceGate] = None  # the provider's (testbed/live/run.py sets it)
        self.entry_kept: List[Dict[str, int]] = []  # per restart that kept them: ready items in the entry queues

    # -- actions (testbed.actions.ActionTarget) ---------------------------------------------
    def apply(self, t: float, actions: Sequence[Action], immediate: bool = False) -> None:
        dispatch(t, actions, self, self.records, self.scalings, immediate)
        self.progress(t)

    def lease(self, t: float, immediate: bool) -> str:
        return self.pool.lease(t, immediate=immediate)

    def start(self, t: float, operator: str, host: str, immediate: bool) -> str:
        return self._start(t, operator, host, immediate)

    def stop(self, t: float, instance: str) -> None:
        self.pool.stop_instance(instance)
        self._inactive.discard(instance)

    def migrate(self, t: float, operator: str, instance: str, target: str, immediate: bool) -> str:
        new = self._start(t, operator, target, immediate)
        self._migrations[new] = instance
        return new

    def prolong(self, t: float, host: str) -> None:
        self.pool.prolong(host)

    def release(self, t: float, host: str) -> None:
        self._releasing.add(host)

    def set_active(self, t: float, operator: str, active: int) -> Dict[str, bool]:
        """As in the simulator: the oldest instances are the active ones."""
        replaced = self.replaced()
        members = sorted((i for i in self.pool.instance_views()
                          if i.operator == operator and i.id not in replaced and i.state != InstanceState.draining),
                         key=lambda i: (i.started_at, i.id))
        on = [i.id for i in members if i.id not in self._inactive]
        if active > len(on):
            switched = dict.fromkeys([i.id for i in members if i.id in self._inactive][: active - len(on)], True)
        else:
            switched = dict.fromkeys(on[max(active, 0):], False)
        for instance, now_active in switched.items():
            (self._inactive.discard if now_active else self._inactive.add)(instance)
            if self._paused_until is None:
                self._switch(instance, now_active)
        return switched

    def restart(self, t: float, downtime_s: float, purge: bool, purge_entry: bool = True) -> Dict[str, int]:
        """Every instance stops consuming for the downtime (resumed by `progress`); with `purge` the
        operators' queues are emptied on the broker (the entry queues only with `purge_entry`) and
        the purged items returned per operator."""
        for i in self.pool.instance_views():
            self._switch(i.id, False)
        self._paused_until = t + downtime_s
        if not purge:
            return {}
        if self.switchboard is None:
            raise RuntimeError("a restart with purge needs the broker (no switchboard configured)")
        purged, kept = self.switchboard.purge(entry=purge_entry)
        if not purge_entry:
            self.entry_kept.append(kept)
        for o, n in purged.items():
            self._purged[o] = self._purged.get(o, 0) + n
            self.purged_total[o] = self.purged_total.get(o, 0) + n
        return purged

    def source_downtime(self, t: float, until: float, mode: str) -> None:
        """The provider publishes nothing until the downtime ends (`progress` opens the gate with the
        replicas): with `hold` the held ticks enter at the provider's next tick, with `drop` they
        never do, with `pause` the trace resumes where it stopped (data_provider/source_gate.py)."""
        if self.source_gate is None:
            raise RuntimeError("acting on the source needs the run's provider (no source gate configured)")
        self.source_gate.close(mode)

    def take_purged(self) -> Dict[str, int]:
        """Items purged per operator since the previous call (the monitor records them as dropped)."""
        purged, self._purged = self._purged, {}
        return purged

    def _switch(self, instance: str, active: bool) -> None:
        if self.switchboard is None:
            raise RuntimeError("pool activation needs the broker and Redis (no switchboard configured)")
        self.switchboard.set_active(instance, active)

    def _start(self, t: float, operator: str, host: str, immediate: bool = False) -> str:
        return self.pool.start_instance(operator, host, self.env_for(operator), t, immediate=immediate,
                                        volumes=self.volumes_for(operator))

    # -- between actions -------------------------------------------------------------------
    def progress(self, t: float) -> None:
        """Finish migrations whose copy runs and releases whose host is empty or out of paid time;
        end a restart's downtime."""
        states = {i.id: i for i in self.pool.instance_views()}
        if self._paused_until is not None and t >= self._paused_until:
            self._paused_until = None
            for instance in states:
                if instance not in self._inactive:
                    self._switch(instance, True)
            if self.source_gate is not None:
                self.source_gate.open()
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
            if dead.id in self._inactive:  # the replacement takes its place in the pool, switched off
                self._inactive.discard(dead.id)
                self._inactive.add(new)
                self._switch(new, False)
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
            if i.id in self._inactive:
                i = replace(i, active=False)
            instances.append(i)
        hosts = tuple(
            replace(h, cpu_free=h.cpu_free + freed.get(h.id, (0, 0))[0],
                    memory_free=h.memory_free + freed.get(h.id, (0, 0))[1],
                    releasing=h.releasing or h.id in self._releasing)
            for h in self.pool.host_views(t)
        )
        return hosts, tuple(instances)
