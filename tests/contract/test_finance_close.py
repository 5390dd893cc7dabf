"""Month close, the tenant Merkle log and the exports on both backends: statement totals, byte-identical re-runs,
period boundaries, late postings carried once, proofs, deliveries, GL batches, and `sha256sum` over the export."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from settlekit.append import job_appender
from settlekit.application import finance as FIN
from settlekit.errors import SettlekitError
from settlekit.events.canonical import canonical_json
from settlekit.events.envelope import Signer, finalize, make_draft
from settlekit.ledger import accounts as A
from settlekit.ledger import merkle
from settlekit.ledger.close import (
    StreamLeaf,
    verify_close_document,
    verify_consistency_proof,
    verify_inclusion_proof,
)
from settlekit.ledger.postings import make_entry
from settlekit.ledger.timeline import parse_instant
from settlekit.simulate import SCENARIO_ORDER, Fleet, job_stream
from settlekit.store import ledger as ledger_rows
from settlekit.store import ledger_timeline as timeline
from settlekit.store.db import Database
from settlekit.store.deliveries import Destination, put_destination

NOW = datetime(2026, 6, 1, tzinfo=UTC)
SIGNER = Signer.generate()
ACCOUNTS = (A.CASH, A.CUSTOMER_ESCROW, A.PLATFORM_REVENUE, A.OPERATOR_PAYABLE, A.CLAIMS_PAYABLE)


def _tenant() -> str:
    return f"t_{uuid.uuid4().hex[:10]}"


def _post(db: Database, tenant: str, job: str, entry_id: str, at: str, amount: int, event_type: str = "BOOKED",
          accounts: tuple[str, str] = (A.CASH, A.CUSTOMER_ESCROW)) -> None:
    """One balanced journal entry written straight to the ledger (as an append's transaction would)."""
    entry = make_entry(entry_id, at, f"job:{job} {event_type}", [(accounts[0], amount), (accounts[1], -amount)])
    alloc = [{"entryId": entry_id, "postingId": "p1", "accountId": accounts[1], "partyId": "pty_customer:c1",
              "partyRole": "customer", "currency": "USD", "amountCents": -amount}]
    _source_event(db, tenant, f"evt_{entry_id}", at)
    with db.transaction() as tx:
        ledger_rows.write_entries(tx, tenant, job, [{"eventId": f"evt_{entry_id}", "eventType": event_type,
                                                     "entry": entry}], alloc, {f"evt_{entry_id}": 1})


def _source_event(db: Database, tenant: str, event_id: str, at: str) -> None:
    """A stored event for an entry written straight to the ledger (the ledger's timeline places an entry at its
    source event's position), on a stream of its own that is not a job stream (so no log leaf)."""
    draft = make_draft(stream_id=f"src_{event_id}", type="MONTH_CLOSE_REQUESTED", actor={"type": "system", "id": "t"},
                       payload={}, at=at, id=event_id)
    job_appender(db, server_rules=False, server_signer=SIGNER).append(tenant, f"src_{event_id}",
                                                                     [finalize(draft, None, SIGNER)])


def _close(db: Database, tenant: str, month: str) -> dict[str, Any]:
    return FIN.close_month(db, tenant, month, SIGNER, now=NOW).document


def _journal(db: Database, tenant: str, month: str) -> bytes:
    out = io.BytesIO()
    FIN.export_journal(db, tenant, month, out.write)
    return out.getvalue()


def _simulated(db: Database, tenant: str) -> Fleet:
    """One job per demo scenario, all in January 2026."""
    fleet = Fleet.create()
    store = job_appender(db, clock=lambda: datetime(2026, 1, 6, tzinfo=UTC), server_rules=False)
    for reg in fleet.registrations():
        store.signer_keys.register(tenant, reg["publicKeyPem"], reg["purpose"], entity_id=reg.get("entityId"))
    for i, scenario in enumerate(SCENARIO_ORDER):
        events = job_stream(scenario, f"job_{i:04d}", fleet, i)
        store.append(tenant, events[0]["streamId"], events)
    return fleet


def _extend(db: Database, tenant: str, job: str, at: datetime, count: int = 1) -> None:
    """Server-actor notes appended to a job stream (or a new one) at `at`."""
    store = job_appender(db, clock=lambda: at + timedelta(minutes=1), server_rules=False, server_signer=SIGNER)
    head = store.streams.head_and_snapshot(tenant, job)[0]
    prev = head.chain_hash if head else None
    events = []
    for n in range(count):
        kind = "JOB_CREATED" if prev is None and n == 0 else "DISPATCH_REQUESTED"
        payload = {"tenantId": tenant, "templateId": "t"} if kind == "JOB_CREATED" else \
            {"note": n}
        draft = make_draft(stream_id=job, type=kind, actor={"type": "system", "id": "proxy"}, payload=payload,
                           at=(at + timedelta(seconds=n)).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
                           id=f"evt_{job}_{uuid.uuid4().hex[:8]}")
        event = finalize(draft, prev, SIGNER)
        prev = event["chainHash"]
        events.append(event)
    store.append(tenant, job, events)


def test_a_month_close_is_signed_verifiable_and_sums_its_entries(db: Database) -> None:
    tenant = _tenant()
    _simulated(db, tenant)
    doc = _close(db, tenant, "2026-01")
    assert verify_close_document(doc)["ok"]
    assert verify_close_document(doc, {SIGNER.key_id: SIGNER.public_key_pem})["keyPinned"]
    assert not verify_close_document(doc, {})["ok"]
    stmt = doc["statement"]
    assert stmt["debitCents"] == stmt["creditCents"] > 0
    assert sum(a["netCents"] for a in stmt["accounts"]) == 0
    assert stmt["jobsSettled"] == len(SCENARIO_ORDER)
    assert stmt["credits"]["count"] == 1 and stmt["credits"]["amountCents"] > 0
    assert stmt["claimsPaid"]["count"] == 1 and stmt["claimsPaid"]["amountCents"] > 0
    assert doc["merkleLog"]["treeSize"] == len(SCENARIO_ORDER) == doc["merkleLog"]["leavesAppended"]
    tampered = json.loads(canonical_json(doc))
    tampered["statement"]["jobsSettled"] += 1
    assert not verify_close_document(tampered)["ok"]


def test_re_running_a_close_gives_the_byte_identical_document(db: Database) -> None:
    tenant = _tenant()
    _simulated(db, tenant)
    first = FIN.close_month(db, tenant, "2026-01", SIGNER, now=NOW)
    again = FIN.close_month(db, tenant, "2026-01", SIGNER, now=NOW)
    assert first.created and not again.created
    assert canonical_json(again.document) == canonical_json(first.document)
    other_key = FIN.close_month(db, tenant, "2026-01", Signer.generate(), now=NOW)
    assert canonical_json(other_key.document) == canonical_json(first.document)
    assert FIN.get_close(db, tenant, "2026-01") == first.document


def test_the_journal_export_verifies_with_plain_sha256sum(db: Database, tmp_path: Path) -> None:
    if shutil.which("sha256sum") is None:
        pytest.skip("sha256sum is not installed")
    tenant = _tenant()
    _simulated(db, tenant)
    doc = _close(db, tenant, "2026-01")
    path = tmp_path / "journal.csv"
    with path.open("wb") as out:
        result = FIN.export_journal(db, tenant, "2026-01", out.write)
    digest = subprocess.run(["sha256sum", str(path)], capture_output=True, text=True, check=True).stdout.split()[0]
    assert digest == doc["journal"]["sha256"] == result["sha256"]
    lines = path.read_bytes().decode("utf-8").split("\n")
    assert lines[0] == "entry_id,at,memo,account_id,party_id,debit_cents,credit_cents" and lines[-1] == ""
    assert len(lines) - 2 == doc["journal"]["rows"] == doc["statement"]["postings"]


def test_entries_across_the_boundary_are_counted_once_and_late_ones_in_the_next_close(db: Database) -> None:
    tenant = _tenant()
    _post(db, tenant, "job_a", "e1", "2026-01-31T23:59:59.999Z", 100)
    _post(db, tenant, "job_a", "e2", "2026-02-01T00:00:00.000Z", 200)
    jan = _close(db, tenant, "2026-01")
    assert jan["statement"]["debitCents"] == 100 and jan["statement"]["carriedIn"] == []
    _post(db, tenant, "job_b", "late", "2026-01-15T12:00:00.000Z", 40)  # arrives after January was closed
    feb = _close(db, tenant, "2026-02")
    assert feb["statement"]["debitCents"] == 240
    assert feb["statement"]["carriedIn"] == [{"entryId": "late", "sourceEventId": "evt_late",
                                              "originalPeriod": "2026-01"}]
    assert canonical_json(_close(db, tenant, "2026-01")) == canonical_json(jan)  # January is frozen
    mar = _close(db, tenant, "2026-03")
    assert mar["statement"]["entries"] == 0 and mar["period"]["previousClose"] == "2026-02"
    assert b"late" not in _journal(db, tenant, "2026-03") and b"late" in _journal(db, tenant, "2026-02")


def test_closes_go_forward_and_only_over_ended_months(db: Database) -> None:
    tenant = _tenant()
    _post(db, tenant, "job_a", "e1", "2026-02-03T00:00:00.000Z", 100)
    with pytest.raises(SettlekitError) as err:
        FIN.close_month(db, tenant, "2026-06", SIGNER, now=NOW)
    assert err.value.code == "FINANCE_PERIOD_OPEN"
    _close(db, tenant, "2026-02")
    with pytest.raises(SettlekitError) as err:
        _close(db, tenant, "2026-01")
    assert err.value.code == "FINANCE_PERIOD_ORDER"
    with pytest.raises(SettlekitError) as err:
        _close(db, tenant, "2026-13")
    assert err.value.code == "FINANCE_MONTH_INVALID"
    with pytest.raises(SettlekitError) as err:
        FIN.get_close(db, tenant, "2026-03")
    assert err.value.code == "FINANCE_CLOSE_NOT_FOUND"


def test_the_log_grows_by_changed_streams_with_inclusion_and_consistency_proofs(db: Database) -> None:
    tenant = _tenant()
    _extend(db, tenant, "job_a", datetime(2026, 1, 10, tzinfo=UTC), 2)
    _extend(db, tenant, "job_b", datetime(2026, 1, 11, tzinfo=UTC), 1)
    jan = _close(db, tenant, "2026-01")
    _extend(db, tenant, "job_a", datetime(2026, 2, 2, tzinfo=UTC), 1)
    _extend(db, tenant, "job_c", datetime(2026, 2, 3, tzinfo=UTC), 3)
    feb = _close(db, tenant, "2026-02")
    mar = _close(db, tenant, "2026-03")
    assert [d["merkleLog"]["treeSize"] for d in (jan, feb, mar)] == [2, 4, 4]
    assert feb["merkleLog"]["previousRootHash"] == jan["merkleLog"]["rootHash"]
    proof = FIN.inclusion_proof(db, tenant, "2026-02", "job_a")
    assert proof["leaf"]["eventCount"] == 3 and proof["leafIndex"] == 2
    assert verify_inclusion_proof(proof)["ok"]
    for month, job in (("2026-01", "job_a"), ("2026-01", "job_b"), ("2026-02", "job_c")):
        assert verify_inclusion_proof(FIN.inclusion_proof(db, tenant, month, job))["ok"]
    forged = json.loads(canonical_json(proof))
    forged["leaf"]["eventCount"] = 4
    assert not verify_inclusion_proof(forged)["ok"]
    with pytest.raises(SettlekitError) as err:
        FIN.inclusion_proof(db, tenant, "2026-02", "job_b")
    assert err.value.code == "FINANCE_LEAF_NOT_FOUND"
    for old, new in (("2026-01", "2026-02"), ("2026-01", "2026-03"), ("2026-02", "2026-03"), ("2026-01", "2026-01")):
        assert verify_consistency_proof(FIN.consistency_proof(db, tenant, old, new))["ok"]
    bad = FIN.consistency_proof(db, tenant, "2026-01", "2026-02")
    bad["proof"] = [bad["proof"][0][::-1], *bad["proof"][1:]]
    assert not verify_consistency_proof(bad)["ok"]
    other = {**FIN.consistency_proof(db, tenant, "2026-01", "2026-02"), "tenantId": "tenant_other"}
    assert verify_consistency_proof(other)["error"]["message"] == "the proof's tenantId is not the signed closes'"


def test_a_close_is_delivered_to_destinations_that_subscribe_to_it(db: Database) -> None:
    tenant = _tenant()
    with db.transaction() as tx:
        put_destination(tx, Destination(tenant, "closes", "https://example.com/c", "inline:s3cret",
                                        artifact_types=("MonthClose.v1",)), now=NOW)
        put_destination(tx, Destination(tenant, "certs", "https://example.com/w", "inline:s3cret",
                                        artifact_types=("WorkCertificate.v1",)), now=NOW)
    _post(db, tenant, "job_a", "e1", "2026-01-03T00:00:00.000Z", 100)
    first = FIN.close_month(db, tenant, "2026-01", SIGNER, now=NOW)
    assert first.deliveries == 1
    assert FIN.close_month(db, tenant, "2026-01", SIGNER, now=NOW).deliveries == 0
    with db.read() as tx:
        rows = tx.fetchall("SELECT destination_id, artifact_id, artifact_hash FROM deliveries WHERE tenant_id = ?",
                           (tenant,))
    assert [tuple(r) for r in rows] == [("closes", "close_2026-01", first.document["artifactHash"])]
    from settlekit.delivery.receiver import verify_artifact
    from settlekit.delivery.sink import artifact_loader

    with db.read() as tx:
        assert artifact_loader(tx, tenant, "close_2026-01") == first.document
    verify_artifact(first.document)  # what a receiver checks: the artifactHash


def test_gl_batch_maps_every_account_and_refuses_an_unmapped_one(db: Database) -> None:
    tenant = _tenant()
    _post(db, tenant, "job_a", "e1", "2026-01-03T00:00:00.000Z", 100)
    _post(db, tenant, "job_a", "e2", "2026-01-04T00:00:00.000Z", 30, "SETTLED", (A.CUSTOMER_ESCROW, A.OPERATOR_PAYABLE))
    doc = _close(db, tenant, "2026-01")
    with pytest.raises(SettlekitError) as err:
        FIN.export_gl_batch(db, tenant, "2026-01", io.BytesIO().write)
    assert err.value.code == "FINANCE_GL_MAPPING_NOT_FOUND"
    with pytest.raises(SettlekitError) as err:
        FIN.put_gl_mapping(db, tenant, {"schemaVersion": "GlMapping.v1", "accounts": {"acct_nope": {"glAccount": "1"}}})
    assert err.value.code == "FINANCE_GL_MAPPING_INVALID"
    accounts = {A.CASH: {"glAccount": "1000"}, A.CUSTOMER_ESCROW: {"glAccount": "2100"}}
    FIN.put_gl_mapping(db, tenant, {"schemaVersion": "GlMapping.v1", "accounts": accounts})
    out = io.BytesIO()
    with pytest.raises(SettlekitError) as err:
        FIN.export_gl_batch(db, tenant, "2026-01", out.write)
    assert err.value.code == "FINANCE_GL_ACCOUNT_UNMAPPED" and out.getvalue() == b""
    mapping = FIN.get_gl_mapping(db, tenant)
    mapping["accounts"][A.OPERATOR_PAYABLE] = {"glAccount": "2200", "name": "Operator payable"}
    FIN.put_gl_mapping(db, tenant, mapping)
    result = FIN.export_gl_batch(db, tenant, "2026-01", out.write)
    batch = json.loads(out.getvalue())
    assert batch["closeArtifactHash"] == doc["artifactHash"] and batch["lineCount"] == result["rows"] == 4
    assert sum(line["debitCents"] - line["creditCents"] for line in batch["lines"]) == 0
    assert {line["glAccount"] for line in batch["lines"]} == {"1000", "2100", "2200"}


_times = st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2026, 4, 30, 23, 59, 59),
                      timezones=st.just(UTC))
_entry = st.tuples(_times, st.integers(1, 10**9), st.sampled_from(ACCOUNTS[1:]))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=st.lists(_entry, max_size=12), late=st.lists(_entry, max_size=6))
def test_closes_count_every_entry_once_and_their_totals_are_their_sums(
        db: Database, before: Sequence[tuple[datetime, int, str]], late: Sequence[tuple[datetime, int, str]]) -> None:
    tenant = _tenant()

    def post(items: Sequence[tuple[datetime, int, str]], tag: str) -> None:
        for i, (at, amount, account) in enumerate(items):
            _post(db, tenant, f"job_{i % 3}", f"{tag}{i:03d}", at.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
                  amount, accounts=(A.CASH, account))

    post(before, "b")
    docs = [_close(db, tenant, m) for m in ("2026-01", "2026-02")]
    post(late, "l")  # any time from January to April, after February was closed
    docs += [_close(db, tenant, m) for m in ("2026-03", "2026-04")]
    stmts = [d["statement"] for d in docs]
    everything = [*before, *late]
    assert sum(s["entries"] for s in stmts) == len(everything)
    assert sum(s["debitCents"] for s in stmts) == sum(amount for _, amount, _ in everything)
    for month, stmt in zip(("2026-01", "2026-02"), stmts[:2], strict=True):
        assert stmt["debitCents"] == sum(a for at, a, _ in before if at.strftime("%Y-%m") == month)
    carried = [c["entryId"] for s in stmts for c in s["carriedIn"]]
    assert sorted(carried) == sorted(f"l{i:03d}" for i, (at, _, _) in enumerate(late) if at < datetime(2026, 3, 1,
                                                                                                      tzinfo=UTC))
    for stmt in stmts:
        by_account = {a["accountId"]: a for a in stmt["accounts"]}
        assert sum(a["debitCents"] for a in stmt["accounts"]) == stmt["debitCents"] == stmt["creditCents"]
        assert by_account.get(A.CASH, {"debitCents": 0})["debitCents"] == stmt["debitCents"]
    assert all(canonical_json(_close(db, tenant, d["period"]["month"])) == canonical_json(d) for d in docs)


def test_concurrent_closes_of_one_month_give_one_document(db: Database) -> None:
    import threading

    tenant = _tenant()
    for i in range(20):
        _post(db, tenant, f"job_{i}", f"e{i:03d}", f"2026-01-{1 + i:02d}T00:00:00.000Z", 100 + i)
    _extend(db, tenant, "job_x", datetime(2026, 1, 3, tzinfo=UTC), 2)
    results: list[Any] = []
    errors: list[BaseException] = []

    def close() -> None:
        try:
            results.append(FIN.close_month(db, tenant, "2026-01", SIGNER, now=NOW))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=close) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(r.created for r in results) == [False, False, False, True]
    assert len({canonical_json(r.document) for r in results}) == 1
    assert results[0].document["merkleLog"]["treeSize"] == 1


def test_a_late_event_in_a_closed_month_moves_its_stream_leaf_in_the_next_close(db: Database) -> None:
    tenant = _tenant()
    _extend(db, tenant, "job_a", datetime(2026, 1, 10, tzinfo=UTC), 1)
    jan = _close(db, tenant, "2026-01")
    _extend(db, tenant, "job_a", datetime(2026, 1, 20, tzinfo=UTC), 1)  # dated January, appended after the close
    feb = _close(db, tenant, "2026-02")
    assert (jan["merkleLog"]["treeSize"], feb["merkleLog"]["treeSize"]) == (1, 2)
    proof = FIN.inclusion_proof(db, tenant, "2026-02", "job_a")
    assert proof["leaf"]["eventCount"] == 2 and verify_inclusion_proof(proof)["ok"]
    assert canonical_json(_close(db, tenant, "2026-01")) == canonical_json(jan)


def test_an_entry_at_with_a_utc_offset_is_closed_in_its_utc_month(db: Database) -> None:
    """`at` with an offset other than Z is assigned by its instant: 2026-01-31T20:00-05:00 is a February instant,
    2026-02-01T00:30+01:00 a January one (before, each was assigned by its text, to the other month). The ledger's
    timeline agrees."""
    tenant = _tenant()
    _post(db, tenant, "job_a", "e_feb", "2026-01-31T20:00:00.000-05:00", 100)
    _post(db, tenant, "job_a", "e_jan", "2026-02-01T00:30:00.000+01:00", 7)
    _post(db, tenant, "job_a", "e_mid", "2026-01-15T12:00:00.000+09:00", 1000)
    end_of_jan = parse_instant("2026-01-31T23:59:59.999Z")
    assert end_of_jan is not None and timeline.balances_as_of(db, tenant, "t", end_of_jan)["acct_cash"] == 1007
    jan = _close(db, tenant, "2026-01")
    assert jan["statement"]["debitCents"] == 1007
    feb = _close(db, tenant, "2026-02")
    assert feb["statement"]["debitCents"] == 100
    assert b"e_feb" in _journal(db, tenant, "2026-02") and b"e_feb" not in _journal(db, tenant, "2026-01")
    assert canonical_json(_close(db, tenant, "2026-01")) == canonical_json(jan)  # a re-run is identical


def test_a_late_entry_with_a_utc_offset_is_carried_by_its_instant(db: Database) -> None:
    """Entries arriving after January was closed land in February's close; carried only if their instant is in
    January (2026-02-01T00:30+01:00 is), not by their text."""
    tenant = _tenant()
    _post(db, tenant, "job_a", "e_0", "2026-01-10T00:00:00.000Z", 1)
    _close(db, tenant, "2026-01")
    _post(db, tenant, "job_a", "e_jan", "2026-02-01T00:30:00.000+01:00", 7)
    _post(db, tenant, "job_a", "e_feb", "2026-01-31T20:00:00.000-05:00", 100)
    _close(db, tenant, "2026-02")
    with db.read() as tx:
        carried = dict(tx.fetchall("SELECT entry_id, carried FROM finance_entry_periods WHERE tenant_id = ?"
                                   " AND period = '2026-02'", (tenant,)))
    assert {k: bool(v) for k, v in carried.items()} == {"e_jan": True, "e_feb": False}


def test_a_stream_leaf_counts_the_events_before_the_month_end_as_instants(db: Database) -> None:
    """A job stream's last event of January by instant: one dated 2026-01-31T20:00-05:00 is in February, so
    January's leaf counts the stream's first event only, and February's both."""
    tenant = _tenant()
    _extend(db, tenant, "job_a", datetime(2026, 1, 10, tzinfo=UTC), 1)
    store = job_appender(db, clock=lambda: datetime(2026, 2, 1, 2, tzinfo=UTC), server_rules=False,
                         server_signer=SIGNER)
    head = store.streams.head_and_snapshot(tenant, "job_a")[0]
    assert head is not None
    draft = make_draft(stream_id="job_a", type="DISPATCH_REQUESTED", actor={"type": "system", "id": "proxy"},
                       payload={"note": 1}, at="2026-01-31T20:00:00.000-05:00", id="evt_job_a_offset")
    store.append(tenant, "job_a", [finalize(draft, head.chain_hash, SIGNER)])
    _close(db, tenant, "2026-01")
    assert FIN.inclusion_proof(db, tenant, "2026-01", "job_a")["leaf"]["eventCount"] == 1
    _close(db, tenant, "2026-02")
    assert FIN.inclusion_proof(db, tenant, "2026-02", "job_a")["leaf"]["eventCount"] == 2


def test_year_zero_is_no_month(db: Database) -> None:
    with pytest.raises(SettlekitError) as refused:
        _close(db, _tenant(), "0000-01")
    assert refused.value.code == "FINANCE_MONTH_INVALID"


def test_a_carried_entry_with_an_offset_names_the_month_of_its_instant(db: Database) -> None:
    """A late entry at 2026-02-01T00:30+01:00 (a January instant) is carried into February, whose `carriedIn`
    named its `originalPeriod` 2026-02 (the first seven characters of its text). Found by a reviewer."""
    tenant = _tenant()
    _post(db, tenant, "job_a", "e_0", "2026-01-10T00:00:00.000Z", 1)
    _close(db, tenant, "2026-01")
    _post(db, tenant, "job_a", "e_jan", "2026-02-01T00:30:00.000+01:00", 7)
    feb = _close(db, tenant, "2026-02")
    assert feb["statement"]["carriedIn"] == [{"entryId": "e_jan", "sourceEventId": "evt_e_jan",
                                              "originalPeriod": "2026-01"}]


def _proofs(db: Database, tenant: str, months: dict[str, list[str]]) -> list[dict[str, Any]]:
    out = [FIN.inclusion_proof(db, tenant, month, job) for month, jobs in months.items() for job in jobs]
    return out + [FIN.consistency_proof(db, tenant, old, new) for old in months for new in months if old <= new]


def test_proofs_read_stored_subtrees_and_equal_the_proofs_over_every_leaf(db: Database,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    tenant = _tenant()
    for i in range(11):
        _extend(db, tenant, f"job_{i:02d}", datetime(2026, 1, 10, tzinfo=UTC))
    for i in range(5, 12):
        _extend(db, tenant, f"job_{i:02d}", datetime(2026, 2, 3, tzinfo=UTC))
    _extend(db, tenant, "job_20", datetime(2026, 3, 2, tzinfo=UTC))
    docs = [_close(db, tenant, month) for month in ("2026-01", "2026-02", "2026-03")]
    assert [d["merkleLog"]["treeSize"] for d in docs] == [11, 18, 19]
    months = {"2026-01": [f"job_{i:02d}" for i in range(11)], "2026-02": [f"job_{i:02d}" for i in range(5, 12)],
              "2026-03": ["job_20"]}
    with monkeypatch.context() as patch:  # the stored subtrees alone: no read of the whole log
        patch.setattr(FIN.F, "leaf_hashes", lambda *a, **k: pytest.fail("a proof read every leaf"))
        stored = _proofs(db, tenant, months)
    with monkeypatch.context() as patch:  # the path over every leaf (a log without stored subtrees)
        patch.setattr(FIN.F, "subtree_hashes", lambda *a, **k: {})
        over_leaves = _proofs(db, tenant, months)
    assert [canonical_json(p) for p in stored] == [canonical_json(p) for p in over_leaves]
    for proof in stored:
        verify = verify_inclusion_proof if proof["proofType"] == FIN.INCLUSION_PROOF else verify_consistency_proof
        assert verify(proof)["ok"], proof
    # the migration's data step builds the same subtrees for a log closed before they were stored
    with db.transaction() as tx:
        query = "SELECT level, node_index, node_hash FROM finance_log_nodes WHERE tenant_id = ? ORDER BY 1, 2"
        before = tx.fetchall(query, (tenant,))
        tx.execute("DELETE FROM finance_log_nodes WHERE tenant_id = ?", (tenant,))
        FIN.F.build_log_nodes(tx)
        assert tx.fetchall(query, (tenant,)) == before and len(before) == 16  # 9 + 4 + 2 + 1 over 19 leaves


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.integers(min_value=1, max_value=70), min_size=1, max_size=3), data=st.data())
def test_subtrees_stored_by_closes_fold_into_the_proofs_over_every_leaf(db: Database, batches: list[int],
                                                                        data: st.DataObject) -> None:
    """Store level: leaves appended in batches as closes append them, each batch's completed subtrees stored;
    every audit path and consistency proof read from them equals the one computed over all the leaves."""
    tenant = _tenant()
    sizes = []
    with db.transaction() as tx:
        for n, count in enumerate(batches):
            first = sizes[-1] if sizes else 0
            leaves = [StreamLeaf(f"s_{first + i}", f"{first + i:064x}", 1) for i in range(count)]
            FIN.F.append_leaves(tx, tenant, f"2026-{n + 1:02d}", first, leaves)
            FIN.F.append_nodes(tx, tenant, merkle.nodes_completed(FIN.F.leaf_hashes(tx, tenant), first))
            sizes.append(first + count)
    with db.read() as tx:
        hashes = FIN.F.leaf_hashes(tx, tenant)
        for size in sizes:
            index = data.draw(st.integers(min_value=0, max_value=size - 1))
            ranges = merkle.inclusion_ranges(index, size)
            assert FIN._subtrees(tx, tenant, size, ranges) == merkle.inclusion_path(hashes[:size], index)
            for old in sizes:
                if old <= size:
                    assert FIN._subtrees(tx, tenant, size, merkle.consistency_ranges(size, old)) == \
                        merkle.consistency_proof(hashes[:size], old)
