"""Postings for a whole stream (offline tools, the `ledger postings` CLI, rebuilds)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from settlekit.ledger.postings import entries_for_finance_event


def postings_for_stream(events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Journal entries of a stream in order. A job stream (first event JOB_CREATED) is folded once through the
    validating reducer, each event posted from the state before it; any other stream only posts finance
    events. Errors are raised, never skipped."""
    if not events:
        return []
    if events[0].get("type") != "JOB_CREATED":
        out: list[dict[str, Any]] = []
        for event in events:
            out.extend(entries_for_finance_event(event))
        return out
    from settlekit.jobs.pipeline import process_job_events

    result = process_job_events(None, list(events), with_allocations=False)
    return [item["entry"] for item in result.ledger_entries]
