"""The live host pool's bookkeeping without Docker: lease delays, BTU accounting (the simulator's),
image cache, reservations, engine slots; and the start-up check against an unreachable engine."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from testbed.config import InfrastructureConfig
from testbed.live.engines import EngineError, container_name
from testbed.live.hostpool import HostPool, PoolBook, PoolError
from testbed.live_config import EngineConfig
from testbed.model import InstanceState, LeaseHost, OperatorType, ProlongHost, ReleaseHost
from testbed.sim.cluster import SimCluster
from testbed.topology import Topology
from tests.conftest import compose_config

TYPES = {
    "O1": OperatorType("O1", 1500.0, cpu=660, memory=452, image_mb=89),
    "O3": OperatorType("O3", 750.0, cpu=100, memory=430, image_mb=68),
}
ENGINE_A, ENGINE_B = "unix:///a.sock", "tcp://b:2375"


def book(seed: int = 3, engines=None, max_hosts: int = 64, emulate_pull: bool = True) -> PoolBook:
    infra = InfrastructureConfig(max_hosts=max_hosts, lease_delay_s=[30.0, 60.0], pull_mb_per_s=25.0)
    return PoolBook(infra, engines or [EngineConfig(ENGINE_A, 10)], TYPES, btu_s=600.0, price=1.0,
                    rng=np.random.default_rng(seed), run_id="Run-7", emulate_pull=emulate_pull)


def test_lease_delay_is_seeded_and_btu_starts_at_the_lease():
    a, b = book(seed=3), book(seed=3)
    ha, hb = a.lease(100.0), b.lease(100.0)
    assert 130.0 <= ha.ready_at <= 160.0 and ha.ready_at == hb.ready_at
    assert ha.btu_end == 700.0 and ha.id == "vm1"
    [view] = a.host_views(ha.ready_at - 0.1)
    assert not view.ready and view.cpu_free == 4096 and view.memory_free == 7168 and view.btu_end == 700.0
    assert a.host_views(ha.ready_at)[0].ready
    assert book(seed=4).lease(100.0).ready_at != ha.ready_at
    assert a.lease(200.0, immediate=True).ready_at == 200.0


def test_prolong_release_and_paid_btus():
    pool = book()
    h1, h2, h3 = pool.lease(0.0), pool.lease(0.0), pool.lease(100.0)
    pool.prolong(h1.id)
    pool.prolong(h1.id)
    assert pool.host(h1.id).btu_end == 1800.0
    assert pool.release(900.0, h2.id) == []  # empty: released at once
    assert [v.id for v in pool.host_views(900.0)] == [h1.id, h3.id]
    with pytest.raises(PoolError, match="vm2"):
        pool.prolong(h2.id)
    leases = pd.DataFrame(pool.leases(end_s=1000.0)).set_index("host")
    assert leases.loc[h1.id, "paid_btus"] == 3 and leases.loc[h1.id, "prolongations"] == 2  # paid in advance
    assert not leases.loc[h1.id, "released"] and leases.loc[h1.id, "end_s"] == 1000.0
    assert leases.loc[h2.id, "paid_btus"] == 2 and leases.loc[h2.id, "released"] and leases.loc[h2.id, "end_s"] == 900.0
    assert leases.loc[h3.id, "paid_btus"] == 2 and leases.loc[h3.id, "start_s"] == 100.0


def test_leases_table_equals_the_simulators_for_the_same_actions():
    cfg = compose_config()
    sim = SimCluster(Topology.from_config(cfg.topology), cfg.infrastructure, btu_s=600.0, price_per_btu=1.0,
                     rng=np.random.default_rng(1))
    live = book()
    sim.apply(0.0, [LeaseHost("new:a", "r"), LeaseHost("new:b", "r")], immediate=True)
    live.lease(0.0, immediate=True), live.lease(0.0, immediate=True)
    sim.apply(50.0, [LeaseHost("new:c", "r")], immediate=True)
    live.lease(50.0, immediate=True)
    sim.apply(580.0, [ProlongHost("vm1", "r"), ReleaseHost("vm2", "r")])
    live.prolong("vm1")
    live.release(580.0, "vm2")
    sim.apply(1150.0, [ReleaseHost("vm3", "r")])
    live.release(1150.0, "vm3")
    assert live.leases(end_s=1300.0) == sim.leases(end_s=1300.0)


def test_instances_reserve_capacity_until_they_drain():
    pool = book()
    host = pool.lease(0.0, immediate=True)
    a = pool.place(0.0, "O1", host.id)
    b = pool.place(0.0, "O3", host.id)
    [view] = pool.host_views(1.0)
    assert (view.cpu_free, view.memory_free) == (4096 - 760, 7168 - 882)
    assert pool.mark_draining(5.0, a.id) and not pool.mark_draining(6.0, a.id)
    [view] = pool.host_views(6.0)
    assert (view.cpu_free, view.memory_free) == (4096 - 100, 7168 - 430)
    states = {i.id: i.state for i in pool.instance_views()}
    assert states == {a.id: InstanceState.draining, b.id: InstanceState.starting}
    pool.mark_running(7.0, b.id)
    assert pool.instances[b.id].state == InstanceState.running and pool.instances[b.id].running_at == 7.0
    pool.gone(8.0, a.id, exit_code=0)
    assert [i.id for i in pool.instance_views()] == [b.id]
    [rec_a, rec_b] = pool.records()
    assert rec_a.drain_s == 3.0 and rec_a.exit_code == 0 and not rec_a.crashed
    assert rec_b.start_latency_s == 7.0 and rec_b.exited_at is None


def test_first_start_of_a_type_waits_for_the_emulated_pull():
    pool = book()
    host = pool.lease(100.0)
    pull_o1, pull_o3 = 89 / 25.0, 68 / 25.0
    first = pool.place(100.0, "O1", host.id)
    assert first.create_at == pytest.approx(host.ready_at + pull_o1)
    second = pool.place(host.ready_at + 1.0, "O1", host.id)  # waits for the same pull, not a new one
    assert second.create_at == first.create_at
    assert pool.place(host.ready_at, "O3", host.id).create_at == pytest.approx(host.ready_at + pull_o3)
    later = pool.place(1000.0, "O1", host.id)  # cached
    assert later.create_at == 1000.0
    assert pool.host_views(101.0)[0].images == frozenset({"O1", "O3"})  # being pulled counts
    other = pool.lease(100.0, immediate=True)  # every host has its own cache
    assert pool.place(100.0, "O1", other.id).create_at == pytest.approx(100.0 + pull_o1)
    no_pull = book(emulate_pull=False)
    h = no_pull.lease(0.0, immediate=True)
    assert no_pull.place(3.0, "O1", h.id).create_at == 3.0
    immediate = pool.lease(0.0, immediate=True)
    assert pool.place(0.0, "O3", immediate.id, immediate=True).create_at == 0.0


def test_release_waits_for_the_instances_and_forgets_the_cache():
    pool = book()
    host = pool.lease(0.0, immediate=True)
    a = pool.place(0.0, "O1", host.id)
    b = pool.place(0.0, "O3", host.id)
    pool.mark_draining(10.0, b.id)
    assert pool.release(20.0, host.id) == [a.id]  # b already drains
    [view] = pool.host_views(20.0)
    assert view.releasing
    with pytest.raises(PoolError, match="being released"):
        pool.place(21.0, "O1", host.id)
    pool.mark_draining(20.0, a.id)
    pool.gone(25.0, b.id, exit_code=0)
    assert pool.host_views(25.0)  # a is still draining
    pool.gone(31.0, a.id, exit_code=143)
    assert pool.host_views(31.0) == ()
    row = pd.DataFrame(pool.leases(end_s=100.0)).iloc[0]
    assert row["end_s"] == 31.0 and row["released"]
    fresh = pool.lease(40.0, immediate=True)
    assert fresh.id == "vm2" and fresh.images == {}


def test_engines_fill_in_order_and_limits_hold():
    pool = book(engines=[EngineConfig(ENGINE_A, 1), EngineConfig(ENGINE_B, 2)], max_hosts=3)
    hosts = [pool.lease(0.0), pool.lease(0.0), pool.lease(0.0)]
    assert [h.engine for h in hosts] == [ENGINE_A, ENGINE_B, ENGINE_B]
    with pytest.raises(PoolError, match="max_hosts"):
        pool.lease(0.0)
    full = book(engines=[EngineConfig(ENGINE_A, 1)])
    full.lease(0.0)
    with pytest.raises(PoolError, match="every engine is full"):
        full.lease(0.0)
    pool.release(5.0, hosts[0].id)  # a released host frees its engine's slot
    assert pool.lease(6.0).engine == ENGINE_A


def test_unknown_operator_or_host_is_refused():
    pool = book()
    host = pool.lease(0.0)
    with pytest.raises(PoolError, match="unknown operator"):
        pool.place(0.0, "O9", host.id)
    with pytest.raises(PoolError, match="vm9"):
        pool.place(0.0, "O1", "vm9")


def test_container_names():
    assert container_name("Run-7", "O1", 3) == "run-7-o1-3"
    assert container_name("run 2026/11:22", "O1", 1) == "run-2026-11-22-o1-1"
    pool = book()
    assert pool.place(0.0, "O3", pool.lease(0.0, immediate=True).id).id == "run-7-o3-1"


def test_unreachable_engine_fails_before_anything_is_leased():
    cfg = compose_config()
    cfg.backend.live.engines = [EngineConfig("tcp://127.0.0.1:1", 4)]
    pool = HostPool(cfg, "unit-run", clock=lambda: 0.0)
    with pytest.raises(EngineError, match=r"tcp://127\.0\.0\.1:1: not reachable"):
        pool.lease(0.0)
    assert pool.host_views(0.0) == () and pool.leases(end_t=10.0)["host"] == []
    with pytest.raises(EngineError, match="tcp://127.0.0.1:1"):
        pool.check_engines()



def test_the_drain_allowance_grows_with_the_instances_stopping_per_core(monkeypatch):
    """At a run's end every instance stops at once; each exit (confirms, metrics flush) needs a core,
    so the allowance for it is stop_timeout_s times the instances stopping per core, never less."""
    from types import SimpleNamespace

    import testbed.live.hostpool as hostpool

    cfg = compose_config("backend=docker", "backend.live.stop_timeout_s=20")
    pool = HostPool(cfg, "Run-7", clock=lambda: 0.0)
    pool.service_bound_s = lambda operator: 0.5
    monkeypatch.setattr(hostpool.os, "cpu_count", lambda: 2)
    work = 3.0 * cfg.backend.live.parallel * 0.5

    def stopping(n: int, exited: int = 0) -> None:
        pool.book.instances = {f"i{k}": SimpleNamespace(stop_requested_at=1.0, exited_at=2.0 if k < exited else None)
                               for k in range(n)}

    stopping(1)
    assert pool.drain_timeout_s("O1") == pytest.approx(20.0 + work)
    stopping(2)
    assert pool.drain_timeout_s("O1") == pytest.approx(20.0 + work)  # one per core
    stopping(21)
    assert pool.drain_timeout_s("O1") == pytest.approx(20.0 * 10.5 + work)
    stopping(21, exited=17)  # four still stopping: two per core
    assert pool.drain_timeout_s("O1") == pytest.approx(40.0 + work)
