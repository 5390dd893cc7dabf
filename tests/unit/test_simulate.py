"""Simulated jobs replay the golden scenarios under fresh ids and keys, and go through the store intact."""

from __future__ import annotations

import pytest

from conftest import load_vector
from settlekit.append import job_appender
from settlekit.events.envelope import verify_chain
from settlekit.simulate import Fleet, job_stream, scenarios
from settlekit.store import ledger as ledger_rows
from settlekit.store.db import Database


@pytest.mark.parametrize("scenario", sorted(scenarios()))
def test_simulated_job_matches_template(db: Database, scenario: str) -> None:
    fleet = Fleet.create()
    store = job_appender(db)
    for key in fleet.registrations():
        store.signer_keys.register("tenant_sim", key["publicKeyPem"], key["purpose"], entity_id=key.get("entityId"))
    events = job_stream(scenario, "job_sim_0001", fleet, 1)
    verify_chain(events, fleet.public_keys())
    for event in events:
        store.append("tenant_sim", "job_sim_0001", [event])
    vector = load_vector(f"{scenario}.json")
    totals = ledger_rows.balances(db, "tenant_sim").get("tenant_sim", {})
    assert totals == vector["ledgerTotalsByAccountId"]
    state = store.streams.snapshot("tenant_sim", "job_sim_0001")
    assert state is not None and state["snapshot"]["status"] == vector["job"]["status"]
