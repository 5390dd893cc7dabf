"""Races on PostgreSQL between the operator's delivery tools and the background work (found by a reviewer)."""
from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import psycopg
from prometheus_client import CollectorRegistry

from settlekit.runtime.workers import CleanupScheduler
from settlekit.store import deliveries as store
from settlekit.store.db import connect
from settlekit.store.postgres.backend import PostgresTx


def test_a_delivery_requeued_while_the_cleanup_runs_is_not_deleted(pg_url: str) -> None:
    """The retention cleanup deletes `WHERE id IN (SELECT id ... WHERE expires_at < now)`: a row a concurrent requeue
    locked is re-read after the lock, and PostgreSQL checks only the outer condition on the new version. Before, the
    requeued (pending) delivery was deleted although the requeue answered 200."""
    db = connect(pg_url)
    now = datetime.now(UTC)
    try:
        with db.transaction() as tx:
            store.put_destination(tx, store.Destination("t1", "d1", "http://127.0.0.1:9/x", "secret:sec_x"), now=now)
            store.insert_delivery(tx, store.NewDelivery(
                dedupe_key="k1", message_id="msg_1", scope_key="s", order_seq=1, priority=0, order_key="o",
                tenant_id="t1", destination_id="d1", artifact_type="WorkCertificate.v1", artifact_id="a1",
                artifact_hash="h1"), now=now - timedelta(days=31))
            # failed 31 days ago: past its 30-day retention
            tx.execute("UPDATE deliveries SET state = 'failed', last_error = 'http_500',"
                       " expires_at = now() - interval '1 day'")
            delivery_id = int(tx.scalar("SELECT id FROM deliveries"))

        # the operator's requeue (POST /v1/deliveries/{id}/requeue) is in its transaction ...
        ops = psycopg.connect(pg_url)
        n = store.requeue(PostgresTx(ops), "t1", delivery_id=delivery_id, now=now)
        assert n == 1
        # ... while the retention cleanup tick runs
        cleanup = CleanupScheduler(db, interval=0, registry=CollectorRegistry())
        result: list[object] = []
        t = threading.Thread(target=lambda: result.append(cleanup.tick()))
        t.start()
        with psycopg.connect(pg_url, autocommit=True) as watch:
            for _ in range(200):
                waiting = watch.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                                        " AND datname = current_database()").fetchone()[0]
                if waiting:
                    break
                time.sleep(0.01)
        ops.commit()  # requeue answered 200: the delivery is pending again, due now
        ops.close()
        t.join(10)
        with db.read() as tx:
            row = store.get_delivery(tx, delivery_id)
        assert row is not None and row.state == "pending", \
            "the delivery the requeue just made pending was deleted by the retention cleanup"
    finally:
        db.close()
