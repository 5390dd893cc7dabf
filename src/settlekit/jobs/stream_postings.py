"""Postings for a whole stream (offline tools, the `ledger postings` CLI, rebuilds). It lives above the ledger:
a job stream is posted through the job pipeline (each event from the state before it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from settlekit.jobs.pipeline import process_job_events
from settlekit.ledger.errors import LedgerError
from settlekit.ledger.postings import entries_for_finance_event


def posting_records(events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every posting outcome of a stream in event order: `{eventId, eventType, entry}` per journal entry and
    `{eventId, eventType, error: {code, message}}` per event whose posting rule raised (settld records such
    an error and goes on; so does this). A job stream (first event JOB_CREATED) is folded once through the
    validating reducer, each event posted from the state before it; an event the reducer refuses (schema,
    transition) still raises. Any other stream only posts finance events."""
    if not events:
        return []
    if events[0].get("type") != "JOB_CREATED":
        out: list[dict[str, Any]] = []
        for event in events:
            head = {"eventId": event.get("id"), "eventType": event.get("type")}
            try:
                entries = entries_for_finance_event(event)
            except LedgerError as exc:
                out.append({**head, "error": {"code": exc.reason, "message": exc.message}})
                continue
            out.extend({**head, "entry": entry} for entry in entries)
        return out
    result = process_job_events(None, list(events), with_allocations=False)
    by_id = {e.get("id"): i for i, e in enumerate(events)}
    merged = [*result.ledger_entries, *result.ledger_errors]
    merged.sort(key=lambda item: by_id.get(item["eventId"], len(events)))  # stable: entries keep their order
    return merged


def postings_for_stream(events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Journal entries of a stream in order (postings that raise are left out; `posting_records` reports
    them)."""
    return [item["entry"] for item in posting_records(events) if "entry" in item]
