"""The SDK's event-stream reader split an event's data line at U+2028 / U+0085 (httpx's iter_lines splits like
str.splitlines), so such a character in a payload broke the event's JSON, and a payload string could forge an `id:`
line (a resume then skipped events). Lines now end at CR and LF only, as the WHATWG format says. Found by a
reviewer."""
from __future__ import annotations

import json

import pytest

from settlekit.client import Client
from settlekit.client.sse import parse
from settlekit.store.db import Database
from support.api import TENANT_A, key_for, make_app
from support.http_server import serve
from support.sdk import dispatched_job


@pytest.mark.parametrize("odd", ["\u2028", "\u0085"], ids=["U+2028", "U+0085"])
def test_sse_event_with_a_unicode_line_separator_in_a_string_parses(sqlite_db: Database, odd: str) -> None:
    app = make_app(sqlite_db)
    with serve(app) as url:
        api = Client(url, key_for(sqlite_db, TENANT_A))
        head = dispatched_job(api, "job_sse", "rob_1")
        api.append_events("job_sse", {"type": "INCIDENT_REPORTED", "actor": {"type": "system", "id": "bo"},
                                      "payload": {"incidentId": "inc_1", "type": "DAMAGE_PROPERTY", "severity": 2,
                                                  "summary": f"scuffed{odd}wall", "reportedBy": "ops"}},
                          expected_prev_chain_hash=head)
        page = api.list_feed_events(after=0, limit=500)
        count = len(page["events"])
        events = []
        for message in api.stream_feed_events(after=0):
            events.append(message)
            if len(events) == count:
                break
        api.close()
        last = events[-1]
        assert json.loads(last.data)["payload"]["summary"] == f"scuffed{odd}wall", repr(last.data[-120:])


def test_parse_keeps_u2028_inside_a_data_line() -> None:
    """The parser itself is given lines already split; the reader must split at CR/LF only."""
    assert list(parse(['data: {"a":"x\u2028y"}', ""]))[0].json() == {"a": "x\u2028y"}


def test_a_payload_string_cannot_set_the_sse_event_id(sqlite_db: Database) -> None:
    """A string in one event's payload (written by any appender of the tenant) that holds U+2028 then `id: N`
    becomes an `id:` field for the SDK's reader: the client's resume position (Last-Event-ID) jumps to N and a
    reconnect skips every event up to N."""
    app = make_app(sqlite_db)
    with serve(app) as url:
        api = Client(url, key_for(sqlite_db, TENANT_A))
        head = dispatched_job(api, "job_inj", "rob_1")
        api.append_events("job_inj", {"type": "INCIDENT_REPORTED", "actor": {"type": "system", "id": "bo"},
                                      "payload": {"incidentId": "inc_1", "type": "DAMAGE_PROPERTY", "severity": 2,
                                                  "summary": "x\u2028id: 999999999\u2028y", "reportedBy": "ops"}},
                          expected_prev_chain_hash=head)
        page = api.list_feed_events(after=0, limit=500)
        positions = [str(e["position"]) for e in page["events"]]
        ids = []
        for message in api.stream_feed_events(after=0):
            ids.append(message.id)
            if len(ids) == len(positions):
                break
        api.close()
        assert ids == positions
