"""Long job streams made from a differential-corpus stream, the same every time (no randomness, no clock): the
offline parity vectors (`tests/reference/offline_parity.py`) hold settld's answers for them but not their events,
which `huge_stream` makes again."""

from __future__ import annotations

import hashlib
from typing import Any

from settlekit.events.canonical import canonical_json, parse_json
from settlekit.events.envelope import finalize

DRAFT_FIELDS = ("v", "id", "at", "streamId", "type", "actor", "payload")


def huge_stream(base: list[dict[str, Any]], extra: int) -> list[dict[str, Any]]:
    """`base` with `extra` more events spread over it after its JOB_CREATED, re-chained unsigned: heartbeats of its
    robot (settld's reducer keeps the last one) and notes of a type settld does not know; in the middle a second
    JOB_CREATED, followed by the base stream's events so far again (under new ids), so that the rest of it goes on
    from the same status."""
    out: list[dict[str, Any]] = [base[0]]
    rest = base[1:]
    per_gap = max(1, extra // max(1, len(rest)))
    n = 0
    for i, event in enumerate(rest):
        for _ in range(per_gap if n < extra else 0):
            n += 1
            kind = n % 3
            at = event["at"]
            if kind == 0:
                filler = {"type": "JOB_HEARTBEAT", "actor": {"type": "robot", "id": "rob_huge"},
                          "payload": {"jobId": event["streamId"], "robotId": "rob_huge", "t": at,
                                      "stage": "TASK", "progress": n % 100}}
            else:
                filler = {"type": "NOTE_ADDED", "actor": {"type": "system", "id": "proxy"},
                          "payload": {"note": f"note {n}", "seq": n}}
            out.append({**event, **filler, "id": f"{event['id']}_huge{n:05d}"})
        out.append(event)
        if i == len(rest) // 2:
            out.append({**base[0], "id": f"{base[0]['id']}_huge_restart"})
            out.extend({**e, "id": f"{e['id']}_huge_again"} for e in rest[: i + 1])  # back where it was
    chained, prev = [], None
    for event in out:
        final = finalize({k: event[k] for k in DRAFT_FIELDS}, prev)
        prev = final["chainHash"]
        chained.append(final)
    return chained


def stream_digest(events: list[dict[str, Any]]) -> str:
    """The sha256 of a stream's canonical JSON, to tell that a stream made again is the one answered for."""
    return hashlib.sha256(canonical_json(events, keep_proto=True).encode("utf-8")).hexdigest()


def corpus_stream(corpus: dict[str, str], name: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = parse_json(corpus[name])["events"]
    return events
