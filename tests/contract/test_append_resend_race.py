"""A client-finalized event resent while the first send is still being committed in another API process: the
resend is answered alreadyExists (README), not 409 PREV_CHAIN_HASH_MISMATCH, which says someone else appended.
Found by a reviewer."""
from __future__ import annotations

from typing import Any

import pytest

from settlekit.append import Appender
from settlekit.errors import ConflictError
from settlekit.events.envelope import finalize, make_draft
from settlekit.store.db import Database

ACTOR = {"type": "system", "id": "test"}



def test_concurrent_resend_of_the_same_signed_event_is_already_exists_not_409(pg: Database) -> None:
    first = finalize(make_draft(stream_id="s1", type="T", actor=ACTOR, payload={"n": 1}), None)
    process_a = Appender(pg, group_commit=True)
    process_b = Appender(pg, group_commit=True)
    process_a.append("t1", "s1", [first])
    event = finalize(make_draft(stream_id="s1", type="T", actor=ACTOR, payload={"n": 2}), first["chainHash"])

    # process B has read the head and checked the event; before its commit, process A commits the same event
    # (the client's first send, which B's resend raced)
    real = process_b.recorder.commit

    def commit_after_a(batch: Any, after: Any = None) -> Any:
        answer_a = process_a.append("t1", "s1", [event])
        assert not answer_a.already_exists
        return real(batch, after)

    process_b.recorder.commit = commit_after_a  # type: ignore[method-assign]
    try:
        answer_b = process_b.append("t1", "s1", [event])
    except ConflictError as exc:
        pytest.fail(f"the resend of an event that is stored was answered {exc.code} {exc.status}"
                    f" ({exc.message}); README: resending the same signed event answers 200 alreadyExists")
    finally:
        process_a.close()
        process_b.close()
    assert answer_b.already_exists
