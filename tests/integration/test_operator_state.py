"""The stateful OEE operators against a real Redis: racing instances (threads, each an operator
instance with its own client) and redelivered inputs must apply state exactly once and yield the
same emissions."""
from __future__ import annotations

import json
import random
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import List, Sequence

import pytest
import redis

from data_provider.display_image import render_display, tesseract_available
from operators.api import Emission, OperatorContext
from operators.envelope import Envelope, image_payload
from operators.oee.latency_sink import latency_stream
from operators.oee.records import OeeValue, PartValue, ProductionRecord
from operators.registry import make_operator
from testbed.workloads.payloads import Machine

pytestmark = pytest.mark.integration
T0 = 1_763_788_800_000


def instances(name: str, redis_url: str, prefix: str, n: int, **params) -> list:
    return [make_operator(name, OperatorContext(name, f"{name}-{i}", prefix, redis.Redis.from_url(redis_url), params))
            for i in range(n)]


def race(ops: Sequence, items: Sequence[Envelope], seed: int = 1) -> List[Emission]:
    """Process ``items`` (shuffled) on all ``ops`` at once, as competing consumers do; all emissions."""
    order = list(items)
    random.Random(seed).shuffle(order)
    shares = [order[i::len(ops)] for i in range(len(ops))]
    start = threading.Barrier(len(ops))

    def work(i: int) -> List[Emission]:
        start.wait()
        return [e for item in shares[i] for e in ops[i].process(item)]

    with ThreadPoolExecutor(len(ops)) as pool:
        return [e for out in pool.map(work, range(len(ops))) for e in out]


def env(item_id: str, machine: str, type_: str, ts: int, payload: dict) -> Envelope:
    return Envelope(item_id, machine, type_, ts, ts + 2, payload)


def availability_item(machine: str, k: int, status: str) -> Envelope:
    return env(f"{machine}/S1/{k}", machine, "availability", T0 + 96 * k,
               {"machine_id": machine, "status": status, "timestamp_ms": T0 + 96 * k})


# ---- O2 / O6: one warning per new incident ---------------------------------------------------

def test_o2_warns_once_per_new_defect_incident(redis_url, redis_client, unique_prefix):
    (op,) = instances("O2", redis_url, unique_prefix, 1)
    statuses = ["available"] * 5 + ["defect"] * 5 + ["planned downtime"] * 5 + ["defect"] * 5 + ["available"] * 5
    items = [availability_item("machine-01", k, s) for k, s in enumerate(statuses)]
    out = [e for item in items for e in op.process(item)]
    assert [(e.item_id, e.type, e.payload["incident"], e.payload["since_ms"]) for e in out] == [
        ("machine-01/S1/5/O2", "warning", 1, T0 + 96 * 5), ("machine-01/S1/15/O2", "warning", 2, T0 + 96 * 15)]
    # redelivery: the opening reading yields the same warning again, the others still nothing
    assert op.process(items[5]) == [out[0]]
    assert [e for item in items[6:] for e in op.process(item)] == [out[1]]
    # a late (older) reading changes nothing: the machine is available, an old defect opens nothing
    assert op.process(availability_item("machine-01", 3, "defect")) == []
    assert op.process(availability_item("machine-01", 30, "defect"))[0].payload["incident"] == 3


def test_o2_racing_instances_warn_once_per_incident_and_machine(redis_url, redis_client, unique_prefix):
    ops = instances("O2", redis_url, unique_prefix, 6)
    items = [availability_item(f"machine-0{m}", k, "available" if k < 3 else "defect")
             for m in range(1, 5) for k in range(60)]
    # every reading delivered twice, all in flight at once; the available ones come first
    first, rest = [i for i in items
                   if i.payload["status"] == "available"], [i for i in items if i.payload["status"] == "defect"]
    assert race(ops, first * 2) == []
    warnings = race(ops, rest * 2, seed=7)
    assert sorted({e.payload["machine_id"] for e in warnings}) == [f"machine-0{m}" for m in range(1, 5)]
    assert all(e.payload["incident"] == 1 for e in warnings)
    # only a duplicate of a reading that opened the incident repeats its warning, with the same id
    by_machine = {}
    for e in warnings:
        by_machine.setdefault(e.payload["machine_id"], set()).add(e.item_id)
    assert all(len(ids) == 1 for ids in by_machine.values())
    # only the opening readings are remembered (memory stays small at 250 readings/s)
    assert sorted(redis_client.scan_iter(f"{unique_prefix}:O2:seen:*")) == sorted(
        f"{unique_prefix}:O2:seen:{i.removesuffix('/O2')}".encode() for ids in by_machine.values() for i in ids)


def test_o6_warns_once_per_new_threshold_violation(redis_url, redis_client, unique_prefix):
    ops = instances("O6", redis_url, unique_prefix, 4, threshold_c=85.0)
    temps = [70.0] * 20 + [95.0 + (k % 3) for k in range(40)] + [71.0] * 20 + [85.0] * 5 + [90.0] * 10
    items = [env(f"machine-02/S3/{k}", "machine-02", "temperature", T0 + 48 * k,
                 {"machine_id": "machine-02", "temperature_c": t, "timestamp_ms": T0 + 48 * k})
             for k, t in enumerate(temps)]
    out = []
    for start, end in ((0, 20), (20, 60), (60, 85), (85, 95)):  # phases in order, each raced by 4 instances, twice
        out += race(ops, items[start:end] * 2, seed=start)
    incidents = sorted({(e.payload["incident"], e.payload["kind"]) for e in out})
    assert incidents == [(1, "temperature"), (2, "temperature")]  # 85.0 is not above the threshold
    second = [e for e in out if e.payload["incident"] == 2]
    # racing instances apply the phase's readings in any order: the first applied one opens the incident
    (since,) = {e.payload["since_ms"] for e in second}
    assert T0 + 48 * 85 <= since < T0 + 48 * 95 and second[0].payload["value"] == 90.0


@pytest.mark.live  # the live side of topology.operators.<op>.emission.live=ratio (operators/oee/emission.py)
@pytest.mark.parametrize("name", ["O2", "O6"])
def test_ratio_mode_passes_every_nth_input_of_the_type_once(name, redis_url, redis_client, unique_prefix):
    ops = instances(name, redis_url, unique_prefix, 3, emission="ratio", every_n=50)
    if name == "O2":
        items = [availability_item(f"machine-0{m}", k, "defect") for m in range(1, 5) for k in range(250)]
    else:
        items = [env(f"machine-0{m}/S3/{k}", f"machine-0{m}", "temperature", T0 + 48 * k,
                     {"machine_id": f"machine-0{m}", "temperature_c": 70.0, "timestamp_ms": T0 + 48 * k})
                 for m in range(1, 5) for k in range(250)]
    out = race(ops, items)
    # 1000 inputs counted across racing instances: the 50th, 100th, ... emit, whatever their values
    assert sorted(e.payload["incident"] for e in out) == list(range(50, 1001, 50))
    assert int(redis_client.get(f"{unique_prefix}:{name}:nth")) == 1000
    # a redelivered emitting input emits the same item again and counts nothing; only those are remembered
    first = out[0]
    again = ops[1].process(next(i for i in items if f"{i.item_id}/{name}" == first.item_id))
    assert again == [first] and int(redis_client.get(f"{unique_prefix}:{name}:nth")) == 1000
    assert len(list(redis_client.scan_iter(f"{unique_prefix}:{name}:seen:*"))) == 20


# ---- O4 / O5: cumulative counters ------------------------------------------------------------

def production_items(n: int, machines: int = 3) -> List[Envelope]:
    statuses = ["available", "available", "available", "defect", "planned downtime"]
    out = []
    for k in range(n):
        m = f"machine-0{k % machines + 1}"
        status = statuses[k % len(statuses)]
        produced = 40 + k % 7 if status == "available" else 0
        rec = ProductionRecord(f"{m}/S2/{k}/0", m, "assembly", "hall 1 line 1", produced, k % 3 if produced else 0,
                               0 if status == "planned downtime" else 60, status, T0 + 480 * k)
        out.append(env(f"{rec.record_id}/O1", m, "production_record", rec.timestamp_ms, rec.to_payload()))
    return out


@pytest.mark.parametrize("name", ["O4", "O5"])
def test_cumulative_state_is_applied_once_under_racing_and_redelivery(name, redis_url, redis_client, unique_prefix):
    ops = instances(name, redis_url, unique_prefix, 6)
    items = production_items(150)
    out = race(ops, items * 3)  # every input delivered three times, all racing
    recs = [ProductionRecord.from_payload(i.payload) for i in items]
    expected = {}
    for m in {r.machine_id for r in recs}:
        mine = [r for r in recs if r.machine_id == m]
        if name == "O4":
            expected[m] = {b"total_s": str(60 * len(mine)).encode(),
                           b"scheduled_s": str(sum(60 - r.planned_production_time_s for r in mine)).encode(),
                           b"unscheduled_s": str(sum(60 for r in mine if r.status == "defect")).encode()}
        else:
            expected[m] = {b"produced": str(sum(r.produced_units for r in mine)).encode(),
                           b"defective": str(sum(r.defective_units for r in mine)).encode()}
    for m, fields in expected.items():
        assert redis_client.hgetall(f"{unique_prefix}:{name}:machine:{m}") == fields
    # every delivery of one input yields the identical emission
    by_id = {}
    for e in out:
        by_id.setdefault(e.item_id, set()).add((e.type, tuple(sorted(e.payload.items()))))
    assert len(by_id) == 150 and all(len(v) == 1 for v in by_id.values())
    # the last value of each machine (in any order of application) is the cumulative one over all its records
    finals = {}
    for m, fields in expected.items():
        f = {k.decode(): int(v) for k, v in fields.items()}
        finals[m] = ((f["total_s"] - f["scheduled_s"] - f["unscheduled_s"]) / f["total_s"] if name == "O4"
                     else (f["produced"] - f["defective"]) / f["produced"])
    values = {}
    for e in out:
        values.setdefault(e.payload["machine_id"], set()).add(e.payload["value"])
    for m, final in finals.items():
        assert any(v == pytest.approx(final) for v in values[m])
    assert redis_client.ttl(f"{unique_prefix}:{name}:seen:{items[0].item_id}") > 0


def test_o4_values_in_order(redis_url, redis_client, unique_prefix):
    (op,) = instances("O4", redis_url, unique_prefix, 1)
    items = [i for i in production_items(15, machines=1)]
    values = [op.process(i)[0].payload["value"] for i in items]
    # statuses cycle available x3, defect, planned downtime: after 5 records 3 of 5 cycles were up
    assert values[:5] == pytest.approx([1.0, 1.0, 1.0, 0.75, 0.6])
    assert values[-1] == pytest.approx(0.6)


# ---- O7: the join ----------------------------------------------------------------------------

def part_items(n: int) -> List[Envelope]:
    out = []
    for k in range(n):
        m, record_id = f"machine-0{k % 4 + 1}", f"machine-0{k % 4 + 1}/S2/{k}/0"
        for part, value, op in (("availability", 0.9, "O4"), ("performance", 0.8 + k / 1000, "O3"),
                                ("quality", 0.95, "O5")):
            p = PartValue(record_id, m, part, value, T0 + 480 * k)
            out.append(env(f"{record_id}/O1/{op}", m, part, T0 + 480 * k, p.to_payload()))
    return out


def test_o7_emits_exactly_once_per_record_with_racing_instances(redis_url, redis_client, unique_prefix):
    ops = instances("O7", redis_url, unique_prefix, 6)
    items = part_items(200)
    out = race(ops, items)
    assert sorted(e.item_id for e in out) == sorted(f"machine-0{k % 4 + 1}/S2/{k}/0/O7" for k in range(200))
    for e in out:
        v = OeeValue.from_payload(e.payload)
        k = int(v.record_id.split("/")[2])
        assert (v.availability, v.performance, v.quality) == (0.9, 0.8 + k / 1000, 0.95)
        assert v.oee == pytest.approx(0.9 * (0.8 + k / 1000) * 0.95) and e.machine_id == v.machine_id
    # a redelivery of everything: only the completing parts emit again, the identical items
    again = race(ops, items, seed=3)
    assert sorted(again, key=lambda e: e.item_id) == sorted(out, key=lambda e: e.item_id)
    assert 0 < redis_client.ttl(f"{unique_prefix}:O7:join:machine-01/S2/0/0") <= 3600


def test_o7_waits_for_all_three_parts_and_keeps_the_first_value(redis_url, redis_client, unique_prefix):
    (op,) = instances("O7", redis_url, unique_prefix, 1, join_ttl_s=60)
    a, p, q = part_items(1)
    assert op.process(a) == [] and op.process(p) == []
    changed = Envelope(p.item_id, p.machine_id, p.type, p.origin_ms, p.sent_ms, {**p.payload, "value": 0.1})
    assert op.process(changed) == []  # a redelivered part never overwrites
    (e,) = op.process(q)
    assert e.payload["performance"] == 0.8 and e.payload["oee"] == pytest.approx(0.9 * 0.8 * 0.95)


# ---- O9: reports per batch -------------------------------------------------------------------

def oee_items(n: int) -> List[Envelope]:
    out = []
    for k in range(n):
        m = f"machine-0{k % 5 + 1}"
        v = OeeValue(f"{m}/S2/{k}/0", m, 0.9, 0.85, 0.97, 0.9 * 0.85 * 0.97 - k / 10000, T0 + 480 * k)
        out.append(env(f"{v.record_id}/O7", m, "oee", v.timestamp_ms, v.to_payload()))
    return out


def test_o9_one_report_per_batch_across_racing_instances(redis_url, redis_client, unique_prefix, tmp_path):
    ops = instances("O9", redis_url, unique_prefix, 5, batch_size=20, report_dir=str(tmp_path))
    items = oee_items(70)
    out = race(ops, items * 2)  # duplicates race too
    # each batch's completing input was delivered twice, and each delivery gives the same notice
    assert Counter(e.item_id for e in out) == {f"{unique_prefix}/O9/report/{b}": 2 for b in range(3)}
    assert all(e.payload == f.payload for e in out for f in out if e.item_id == f.item_id)
    notices = {e.payload["batch"]: e.payload for e in out}
    # which values fill a batch depends on the race, so a batch may miss a machine: compare with its list
    stored = {b: [OeeValue.from_payload(json.loads(r))
                  for r in redis_client.lrange(f"{unique_prefix}:O9:batch:{b}", 0, -1)] for b in notices}
    assert all(n["inputs"] == 20 and n["machines"] == len({v.machine_id for v in stored[b]})
               for b, n in notices.items()), (notices, stored)
    for b, n in notices.items():
        pdf = Path(n["path"])
        assert pdf.parent == tmp_path and pdf.name == f"report-{b:06d}.pdf" and pdf.read_bytes().startswith(b"%PDF-")
        assert {e.machine_id for e in out} == {"all"}
    # each of the 70 distinct values was counted into exactly one batch (60 in full ones, 10 waiting)
    assert int(redis_client.get(f"{unique_prefix}:O9:count")) == 70
    ids = [OeeValue.from_payload(json.loads(r)).record_id
           for b in range(4) for r in redis_client.lrange(f"{unique_prefix}:O9:batch:{b}", 0, -1)]
    assert sorted(ids) == sorted(OeeValue.from_payload(i.payload).record_id for i in items)
    # the mean in a notice is the mean of its batch
    batch0 = [OeeValue.from_payload(json.loads(r)).oee
              for r in redis_client.lrange(f"{unique_prefix}:O9:batch:0", 0, -1)]
    assert notices[0]["mean_oee"] == pytest.approx(sum(batch0) / 20)


# ---- O8: latency -----------------------------------------------------------------------------

def test_o8_records_latency_once_per_item(redis_url, redis_client, unique_prefix):
    now = [1_763_788_801.250]
    (op,) = [make_operator("O8", OperatorContext("O8", "O8-0", unique_prefix, redis.Redis.from_url(redis_url),
                                                  {}, clock=lambda: now[0]))]
    warning = env("machine-01/S1/5/O2", "machine-01", "warning", 1_763_788_800_000, {"kind": "defect"})
    assert op.process(warning) == []
    now[0] += 5
    assert op.process(warning) == []  # redelivered: not recorded again
    entries = redis_client.xrange(latency_stream(unique_prefix))
    assert len(entries) == 1
    fields = entries[0][1]
    assert fields[b"latency_ms"] == b"1250" and fields[b"item"] == b"machine-01/S1/5/O2"
    assert fields[b"type"] == b"warning" and fields[b"t_ms"] == b"1763788801250"


# ---- the chain O1 -> O3/O4/O5 -> O7 on a rendered image --------------------------------------

@pytest.mark.skipif(not tesseract_available(), reason="tesseract not installed")
def test_chain_from_display_image_to_oee(redis_url, redis_client, unique_prefix):
    machine = Machine(1, seed=3)
    machine.step()
    rec = machine.production(T0)
    image = env(f"{rec.machine_id}/S2_production/0/0", rec.machine_id, "production", T0,
                image_payload(render_display(rec)))
    (o1,), parts = instances("O1", redis_url, unique_prefix, 1), []
    (record,) = o1.process(image)
    record_env = record.envelope(image, T0 + 500)
    for name in ("O3", "O4", "O5"):
        (op,) = instances(name, redis_url, unique_prefix, 1)
        parts += [e.envelope(record_env, T0 + 600) for e in op.process(record_env)]
    (o7,) = instances("O7", redis_url, unique_prefix, 1)
    out = [e for p in parts for e in o7.process(p)]
    assert len(out) == 1 and out[0].item_id == f"{image.item_id}/O7"
    v = OeeValue.from_payload(out[0].payload)
    a = 0.0 if rec.status != "available" else 1.0
    q = 1.0 if rec.produced_units == 0 else (rec.produced_units - rec.defective_units) / rec.produced_units
    assert (v.availability, v.performance, v.quality) == pytest.approx((a, rec.produced_units * 1.2 / 60, q))
    assert out[0].envelope(parts[-1], T0 + 700).origin_ms == T0


def test_a_decoding_client_gives_the_same_results(redis_url, redis_client, unique_prefix, tmp_path):
    """The runner may hand over a client with decode_responses=True: replies are str, not bytes."""
    def chain(prefix: str, decode: bool) -> list:
        client = redis.Redis.from_url(redis_url, decode_responses=decode)
        ops = {n: make_operator(n, OperatorContext(n, f"{n}-0", prefix, client,
                                                   {"batch_size": 5, "report_dir": str(tmp_path / prefix)}
                                                   if n == "O9" else {}, clock=lambda: 1_763_788_900.0))
               for n in ("O2", "O4", "O5", "O3", "O7", "O9", "O8")}
        out: list = []
        for item in production_items(10):
            parts = [e.envelope(item, 1) for n in ("O3", "O4", "O5") for e in ops[n].process(item)]
            for oee in (e.envelope(parts[0], 2) for p in parts for e in ops["O7"].process(p)):
                out.append(oee.payload)
                for report in ops["O9"].process(oee):
                    out.append({k: v for k, v in report.payload.items() if k != "path"})
                    ops["O8"].process(report.envelope(oee, 3))
        out += [e.payload for k, s in enumerate(("defect", "defect", "available"))
                for e in ops["O2"].process(availability_item("machine-01", k, s))]
        out.append(len(client.xrange(latency_stream(prefix))))
        return out

    plain, decoded = chain(unique_prefix + ":a", False), chain(unique_prefix + ":b", True)
    assert plain == decoded and plain[-1] == 2 and len(plain) == 10 + 2 + 1 + 1
