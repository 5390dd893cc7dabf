"""Named failpoints: the places where a test may step in (crash, pause, answer instead) between two steps.

The package only calls `hit(point, *args)`; nothing in it arms a point. While no point is armed `hit` is one
check of a module-level None, so production pays a function call and nothing else. Tests arm points through
`tests/support/failpoints.py`. A hook receives `hit`'s arguments; what it returns is `hit`'s result (None when
the point is not armed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

Hook = Callable[..., Any]

POINTS: Final[dict[str, str]] = {
    # the dispatcher, inside one consumer's turn; argument: the consumer name
    "dispatch.after_fetch": "events fetched, handler not called",
    "dispatch.after_deliver": "handler returned, cursor not written",
    "dispatch.before_commit": "cursor written, transaction not committed",
    # the artifacts consumer, inside the dispatcher's transaction; no argument
    "artifacts.after_build_before_store": "artifacts built, nothing stored",
    "artifacts.after_store_before_deliveries": "artifacts stored, no delivery enqueued",
    # the delivery worker, one pass; argument: the worker id
    "delivery.claimed": "claim committed, nothing sent",
    "delivery.sending": "the first request of the batch is about to start",
    "delivery.sent": "requests answered, no outcome recorded",
    "delivery.completing": "inside the completion transaction, before commit",
    "delivery.completed": "outcomes committed",
    # the append group commit (store.events.GroupCommitter), hit once per append of a group (argument: its index)
    # once all of them are written, before the COMMIT
    "append.group_commit": "the group's appends written, the group not committed",
    # the client's spool flusher, one batch; argument: the stream id
    "spool.batch_stored": "batch and its idempotency key stored, nothing sent",
    "spool.answered": "the API answered the append, the batch not marked sent",
    "spool.marked": "the batch marked sent",
    # `settlekit ledger rebuild`; argument: the stream id (replayed) or the tenant id (swapping)
    "ledger.rebuild.replayed": "a stream's entries recomputed, not yet in the shadow tables",
    "ledger.rebuild.swapping": "inside the swap transaction: the tenant's ledger rows deleted, rebuilt rows not in",
    # the reference receiver, once a request body is read; arguments: the request handler, headers, body.
    # A hook that answered the request itself returns True.
    "receiver.request": "request read, not verified",
}

_armed: dict[str, Hook] | None = None


def hit(point: str, *args: Any) -> Any:
    """Run the hook armed at `point`, if any, with `args`; returns its result (None when not armed)."""
    if _armed is None:
        return None
    hook = _armed.get(point)
    return None if hook is None else hook(*args)


def arm(point: str, hook: Hook) -> None:
    """Arm `point` (one of POINTS) with `hook`, replacing any hook armed there."""
    global _armed
    if point not in POINTS:
        raise ValueError(f"unknown failpoint {point!r}")
    _armed = {**(_armed or {}), point: hook}


def disarm(point: str) -> None:
    global _armed
    if _armed is not None:
        rest = {name: hook for name, hook in _armed.items() if name != point}
        _armed = rest or None


def disarm_all() -> None:
    global _armed
    _armed = None
