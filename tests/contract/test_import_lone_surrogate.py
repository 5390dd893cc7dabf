"""Imported history may hold a lone UTF-16 surrogate in a payload (settld stored such events; the live path refuses
them in new input). UTF-8 cannot carry one, so every JSON answer writes it as its `\\uXXXX` escape, as JavaScript's
JSON.stringify does, and a client parses back the very string that was stored."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from conftest import load_differential
from settlekit.api.responses import dumps
from settlekit.append import job_appender
from settlekit.application.imports import import_events
from settlekit.events.envelope import finalize
from settlekit.events.recorded import recorded_envelope
from settlekit.store.db import Database
from support.api import client, key_for, make_app

TENANT = "tenant_default"
NOTE = "left \ud800 right \udfff"


def _with_lone_surrogates(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stream with a lone surrogate in its JOB_CREATED's constraints, the chain made again (unsigned, as most
    recorded events are)."""
    out: list[dict[str, Any]] = []
    for event in events:
        draft = recorded_envelope(event, len(out))
        if not out:
            constraints = draft["payload"].get("constraints") or {}
            draft["payload"] = {**draft["payload"], "constraints": {**constraints, "note": NOTE}}
        out.append(finalize(draft, out[-1]["chainHash"] if out else None))
    return out


def test_an_answer_writes_a_lone_surrogate_as_its_escape() -> None:
    value = {"a": NOTE, "b": [1, "\udc00"], "big": 2**70}
    text = dumps(value)
    assert b"\\ud800" in text and b"\\udfff" in text and json.loads(text) == value


def test_imported_history_with_a_lone_surrogate_is_served(db: Database) -> None:
    events = _with_lone_surrogates(load_differential("d001_basic")["events"])
    result = import_events(job_appender(db), TENANT, events)
    assert (result.appended, result.refused) == (len(events), None)
    api = client(make_app(db), key_for(db, TENANT))
    path = f"/v1/jobs/{quote(events[0]['streamId'], safe='')}"
    for url in (path, f"{path}/events", f"{path}/export", "/v1/events"):
        answer = api.get(url)
        assert answer.status_code == 200, (url, answer.text[:300])
        assert NOTE in json.dumps(answer.json(), ensure_ascii=False), url
