"""`ledger rebuild` on both backends: a clean ledger rebuilds with no difference; a corrupted row (amount changed,
entry deleted, extra entry, balance off) is found and reported; `apply` repairs it in one transaction; a rebuild
interrupted by a failpoint leaves the stored ledger as it was."""

from __future__ import annotations

from typing import Any

import pytest

from settlekit.append import HISTORY, job_appender
from settlekit.application.ledger import rebuild
from settlekit.errors import ConflictError
from settlekit.store import ledger_timeline as timeline
from settlekit.store.db import Database
from support import failpoints
from support.ledger import OTHER_TENANT, TENANT, load_vectors
from support.streams import StreamBuilder

TABLES = {"ledger_entries": "entry_id", "ledger_allocations": "entry_id, posting_id, party_id",
          "ledger_balances": "account_id", "ledger_postings": "party_id, account_id, position, posting_index",
          "ledger_sums": "party_id, axis, level, bucket, account_id"}


def stored(db: Database) -> dict[str, Any]:
    """Every ledger row, to compare before and after."""
    out: dict[str, Any] = {}
    with db.read() as tx:
        for table, order in TABLES.items():
            out[table] = [tuple(str(v) for v in row[:10]) for row in tx.fetchall(
                f"SELECT * FROM {table} ORDER BY tenant_id, {order}")]
        out["shadow"] = tx.scalar("SELECT COUNT(*) FROM ledger_rebuild_entries")
    return out


@pytest.fixture
def ledger(db: Database) -> Database:
    load_vectors(db)
    return db


def test_a_clean_ledger_rebuilds_with_no_difference(ledger: Database) -> None:
    before = stored(ledger)
    seen: list[tuple[int, int]] = []
    report = rebuild(ledger, progress=lambda done, total: seen.append((done, total)))
    assert report.differences == [] and not report.applied
    assert report.tenants == sorted([TENANT, OTHER_TENANT])
    assert report.entries == len(before["ledger_entries"]) and report.streams == len(seen) == 6
    assert report.allocations == len(before["ledger_allocations"])
    assert seen[-1] == (6, 6)
    assert rebuild(ledger, tenant_id=OTHER_TENANT).streams == 1
    assert stored(ledger) == before and before["shadow"] == 0


def corrupt(db: Database) -> None:
    with db.transaction() as tx:
        tx.execute("UPDATE ledger_allocations SET amount_cents = amount_cents + 1 WHERE tenant_id = ? AND entry_id ="
                   " 'jnl_evt_settle_completed_0003' AND posting_id = 'p0'", (TENANT,))
        tx.execute("DELETE FROM ledger_entries WHERE tenant_id = ? AND entry_id = 'jnl_evt_claim_adjust_paid_0003'",
                   (TENANT,))
        tx.execute("INSERT INTO ledger_entries (tenant_id, entry_id, job_id, source_event_id, event_type, source_seq,"
                   " entry_index, at, memo, entry_json) SELECT tenant_id, 'jnl_forged', job_id, source_event_id,"
                   " event_type, source_seq, 9, at, memo, entry_json FROM ledger_entries WHERE tenant_id = ?"
                   " AND entry_id = 'jnl_evt_settle_completed_0003'", (TENANT,))
        tx.execute("UPDATE ledger_balances SET balance_cents = balance_cents - 5 WHERE tenant_id = ?"
                   " AND account_id = 'acct_cash'", (OTHER_TENANT,))


def test_corrupted_rows_are_reported_and_apply_repairs_them(ledger: Database) -> None:
    clean = stored(ledger)
    clean_as_of = timeline.balances_as_of(ledger, TENANT, "t", 2**62, party_id="pty_platform")
    corrupt(ledger)
    corrupted = stored(ledger)
    report = rebuild(ledger)
    found = {(d.tenant_id, d.kind, d.change, d.key) for d in report.differences}
    assert (TENANT, "allocation", "changed", "jnl_evt_settle_completed_0003/p0/pty_platform/platform") in found
    assert (TENANT, "entry", "missing", "jnl_evt_claim_adjust_paid_0003") in found
    assert (TENANT, "entry", "extra", "jnl_forged") in found
    assert (OTHER_TENANT, "balance", "changed", "acct_cash") in found
    changed = next(d for d in report.differences if d.kind == "allocation")
    assert changed.stored is not None and changed.rebuilt is not None
    assert changed.stored["amount_cents"] == changed.rebuilt["amount_cents"] + 1
    assert not report.applied and stored(ledger) == corrupted  # reported, nothing changed
    applied = rebuild(ledger, apply=True)
    assert applied.applied and applied.differences == report.differences
    assert rebuild(ledger).differences == []
    assert stored(ledger) == clean
    assert timeline.balances_as_of(ledger, TENANT, "t", 2**62, party_id="pty_platform") == clean_as_of


def test_apply_rebuilds_a_missing_timeline(ledger: Database) -> None:
    clean = stored(ledger)
    with ledger.transaction() as tx:
        tx.execute("DELETE FROM ledger_postings")
        tx.execute("DELETE FROM ledger_sums")
    report = rebuild(ledger, tenant_id=TENANT, apply=True)
    assert [(d.kind, d.tenant_id) for d in report.differences] == [("timeline", TENANT)] and report.applied
    assert rebuild(ledger, tenant_id=TENANT).differences == []
    after = stored(ledger)
    assert after["ledger_entries"] == clean["ledger_entries"]
    assert [r for r in after["ledger_sums"] if r[0] == TENANT] == [r for r in clean["ledger_sums"] if r[0] == TENANT]


@pytest.mark.parametrize("point", ["ledger.rebuild.replayed", "ledger.rebuild.swapping"])
def test_an_interrupted_rebuild_leaves_the_ledger_untouched(ledger: Database, point: str) -> None:
    corrupt(ledger)
    before = stored(ledger)
    failpoints.crash_at(point, times=1)
    with pytest.raises(failpoints.SimulatedCrash):
        rebuild(ledger, apply=True)
    assert stored(ledger) == before  # shadow rows of the run deleted too
    assert rebuild(ledger, apply=True).applied
    assert rebuild(ledger).differences == []


def test_apply_refuses_when_events_were_appended_meanwhile(ledger: Database) -> None:
    corrupt(ledger)
    before = stored(ledger)

    def append_one(*_: Any) -> None:
        failpoints.reset()
        late = StreamBuilder(job_id="job_late", prefix="evt_late")
        late.add("JOB_CREATED", {"tenantId": TENANT, "templateId": "t", "customerId": "cust_1"})
        job_appender(ledger).append(TENANT, "job_late", late.events, policy=HISTORY)

    failpoints.arm("ledger.rebuild.replayed", append_one)
    with pytest.raises(ConflictError) as refused:
        rebuild(ledger, apply=True)
    assert refused.value.code == "LEDGER_REBUILD_STALE"
    assert stored(ledger) == before


def test_an_entry_index_counted_across_a_batch_is_no_difference(ledger: Database) -> None:
    with ledger.transaction() as tx:  # how ledgers written before per-event numbering index a batch's entries
        tx.execute("UPDATE ledger_entries SET entry_index = 7 WHERE tenant_id = ?"
                   " AND entry_id = 'jnl_evt_settle_completed_0003'", (TENANT,))
    assert rebuild(ledger).differences == []


def test_an_append_in_flight_when_the_run_began_makes_the_swap_stale(pg_url: str) -> None:
    """An append drew its position and waits (here on a balance row) when the rebuild reads what to replay; a
    later position commits first. When it commits before the swap, the highest position is unchanged, but its
    stream's head moved: the swap is refused (before, it went through and deleted that append's entries as
    "extra", for good). Nothing is lost; a new run finds nothing to repair."""
    import threading
    import time

    import psycopg

    from conftest import load_vector
    from settlekit.store import ledger as ledger_rows
    from settlekit.store.db import connect

    tenant = "tenant_gap"
    db = connect(pg_url)
    blocker = psycopg.connect(pg_url)
    try:
        vector = load_vector("settle_completed.json")
        store = job_appender(db)
        for signer in vector["signers"]:
            store.signer_keys.register(tenant, signer["publicKeyPem"], signer["role"])
        *head, settled = vector["events"]
        job = settled["streamId"]
        for event in head:
            store.append(tenant, event["streamId"], [event])
        blocker.execute("SELECT * FROM ledger_balances WHERE tenant_id = %s FOR UPDATE", (tenant,))
        errors: list[BaseException] = []

        def append_settled() -> None:
            try:
                job_appender(db).append(tenant, job, [settled])
            except BaseException as exc:  # noqa: BLE001 - asserted below
                errors.append(exc)

        in_flight = threading.Thread(target=append_settled)
        in_flight.start()
        with psycopg.connect(pg_url, autocommit=True) as probe:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                row = probe.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                                    " AND datname = current_database()").fetchone()
                if row and row[0]:
                    break
                time.sleep(0.05)
            else:
                pytest.fail("the SETTLED append never waited on the balance row")
        late = StreamBuilder(job_id="job_late", prefix="evt_late")  # a later position commits first
        late.add("JOB_CREATED", {"tenantId": OTHER_TENANT, "templateId": "t", "customerId": "cust_1"})
        job_appender(db).append(OTHER_TENANT, "job_late", late.events, policy=HISTORY)

        def release(done: int, total: int) -> None:
            if done == total:
                blocker.commit()
                in_flight.join(30)

        with pytest.raises(ConflictError) as refused:
            rebuild(db, apply=True, progress=release)
        assert refused.value.code == "LEDGER_REBUILD_STALE"
        assert not errors
        types = [e["eventType"] for e in ledger_rows.entries_for_job(db, tenant, job)]
        assert "SETTLED" in types, types
        assert rebuild(db).differences == []
    finally:
        blocker.close()
        db.close()
