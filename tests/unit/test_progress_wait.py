"""runtime.workers.wait_until_caught_up on an embedded database: it waits for the consumers, the deliveries and
the receiver, and gives up at its timeout."""

from __future__ import annotations

from pathlib import Path

from settlekit.runtime.workers import wait_until_caught_up
from settlekit.store.consumers import ConsumerRepository
from settlekit.store.db import connect
from settlekit.store.progress import Outstanding, outstanding


def test_waits_for_what_is_outstanding(tmp_path: Path) -> None:
    db = connect(f"sqlite:///{tmp_path / 'w.db'}")
    try:
        db.migrate()
        assert outstanding(db) == Outstanding(undelivered=0, artifacts=0, consumers=0, consumers_behind=0)
        # no worker has registered a consumer yet: not caught up, however empty the queues are
        assert not wait_until_caught_up(db, lambda: 0, timeout=0.05, poll=0.01)
        with db.transaction() as tx:
            ConsumerRepository(db).register(tx, "artifacts", "worker-1", at_head=False)
        assert outstanding(db).consumers == 1
        assert wait_until_caught_up(db, lambda: 0, timeout=1, poll=0.01)
        assert not wait_until_caught_up(db, lambda: 0, timeout=0.05, poll=0.01, min_artifacts=1)
    finally:
        db.close()
