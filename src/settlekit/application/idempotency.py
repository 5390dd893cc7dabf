"""Idempotent writes: an action run once per (tenant, principal, endpoint, key), its answer stored and replayed
to a retry with the same request, a different request under the same key refused."""

from __future__ import annotations

from settlekit.store.idempotency import DEFAULT_WAIT_SECONDS, KeyScope, request_hash, run, run_in_transaction

__all__ = ["DEFAULT_WAIT_SECONDS", "KeyScope", "request_hash", "run", "run_in_transaction"]
