"""A ledger with several jobs and tenants for the ledger read and rebuild tests: the scenario vectors appended
event by event."""

from __future__ import annotations

from conftest import load_vector, scenario_names
from settlekit.append import job_appender
from settlekit.store.db import Database

TENANT = "tenant_default"
OTHER_TENANT = "tenant_b"
CORE_ONLY = {"sla_credit.json"}  # valid for settld's core, refused in part by its API's rules


def load_vectors(db: Database) -> None:
    """Every scenario vector into TENANT, and settle_completed into OTHER_TENANT as well."""
    for tenant, names in ((TENANT, scenario_names()), (OTHER_TENANT, ["settle_completed.json"])):
        for name in names:
            vector = load_vector(name)
            store = job_appender(db, server_rules=name not in CORE_ONLY)
            for signer in vector["signers"]:
                store.signer_keys.register(tenant, signer["publicKeyPem"], signer["role"])
            for event in vector["events"]:
                store.append(tenant, event["streamId"], [event])
