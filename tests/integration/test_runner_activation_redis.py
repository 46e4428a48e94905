"""The runner's activation store against real Redis: the flag, the atomic claim of ``active``
(refused while the flag is ``0``) and the reports."""
from __future__ import annotations

import pytest

from operators.activation import RedisActivation
from operators.api import ACTIVE, INACTIVE, STOPPED, InstanceReport, activation_key, instance_state_hash

pytestmark = pytest.mark.integration


def test_flag_claim_and_reports(redis_client, unique_prefix):
    r = redis_client
    store = RedisActivation(r, unique_prefix, "A-1", clock=lambda: 1700000000.25)
    reports = instance_state_hash(unique_prefix)

    def state():
        return InstanceReport.decode(r.hget(reports, "A-1"))

    assert store.wanted() and store.claim_active()  # no flag: active
    assert state() == InstanceReport(ACTIVE, 1700000000250)
    r.set(activation_key(unique_prefix, "A-1"), "0")
    assert not store.wanted()
    store.report(INACTIVE)
    assert not store.claim_active() and state().state == INACTIVE  # no claim while the flag is 0
    r.set(activation_key(unique_prefix, "A-1"), "1")
    assert store.wanted() and store.claim_active() and state().state == ACTIVE
    store.report(STOPPED)
    assert state().state == STOPPED and r.hkeys(reports) == [b"A-1"]

