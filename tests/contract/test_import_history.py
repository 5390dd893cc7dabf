"""`settlekit import` of streams settld's API stored that the live path refuses as new input, on both backends.

The offline parity streams (`tests/vectors/reference_runs/offline_parity.json.gz`: a second JOB_CREATED, unknown and
foreign types, signatures in node's base64 spellings and empty, "__proto__" and integer-like keys, deep payloads,
`at` spellings `Date.parse` reads, ids with white space or beyond 200 characters, actors with more keys, fields
beside the envelope's) each import up to the event where settld's own API first refuses it, appended one at a
time (`reference_runs/import_parity.json.gz`, made by `tests/reference/import_xcheck.py`), and that event is
refused with nothing of it written. A stream whose chain or a signature does not verify is refused whole, before
anything is written (settld never stored such a stream: it verifies the whole chain at each append).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from typing import Any

import pytest

from conftest import VECTORS, backend_database, differential_corpus
from settlekit.append import job_appender
from settlekit.errors import ValidationError
from settlekit.events.canonical import parse_json
from settlekit.events.envelope import VerificationError, verify_chain
from settlekit.events.recorded import check_nesting, recorded_envelope
from settlekit.importer import import_events, parse_import_keys, register_signers
from settlekit.store.db import Database
from support.huge_streams import corpus_stream, huge_stream, stream_digest

RUNS_DIR = VECTORS / "reference_runs"


def _load() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    parity = parse_json(gzip.decompress((RUNS_DIR / "offline_parity.json.gz").read_bytes()).decode("utf-8"))
    answers = json.loads(gzip.decompress((RUNS_DIR / "import_parity.json.gz").read_bytes()))
    runs = []
    for run, answer in zip(parity["runs"], answers["runs"], strict=True):
        assert run["description"] == answer["description"]
        if "huge" in run:
            recipe = run["huge"]
            run = {**run, "events": huge_stream(corpus_stream(differential_corpus(), recipe["base"]),
                                                recipe["extra"])}
        assert stream_digest(run["events"]) == answer["eventsSha256"]
        runs.append({**run, "firstRejection": answer["firstRejection"]})
    return answers, runs


ANSWERS, RUNS = _load()
SIGNERS = parse_import_keys(ANSWERS["signers"])


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def history_db(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Database]:
    """One database per backend for the module; each run imports into a tenant of its own (several runs vary
    the same corpus stream, with the same job and event ids)."""
    with backend_database(request, tmp_path_factory, request.param) as database:
        yield database


def _chain_failure(events: list[dict[str, Any]]) -> int | None:
    """Where the stream's chain or a signature fails as settld verifies it (None: it verifies)."""
    keys = {s.key_id: s.public_key_pem for s in SIGNERS}
    recorded = []
    for i, event in enumerate(events):
        try:
            recorded.append(recorded_envelope(event, i))
        except ValidationError:
            break  # the import stops at this event: the chain after it is not checked
    try:
        verify_chain(recorded, keys)
    except VerificationError as exc:
        index: int = exc.details["index"]
        return index
    return None


def _too_deep(events: list[dict[str, Any]]) -> int | None:
    for i, event in enumerate(events):
        try:
            check_nesting(event, i)
        except ValidationError:
            return i
    return None


def _stored_ids(db: Database, tenant: str, stream_id: str) -> list[str]:
    with db.read() as tx:
        rows = tx.fetchall("SELECT event_id FROM events WHERE tenant_id = ? AND stream_id = ? ORDER BY seq",
                           (tenant, stream_id))
    return [row[0] for row in rows]


@pytest.mark.parametrize("n", range(len(RUNS)), ids=[r["description"] for r in RUNS])
def test_import_stops_where_settlds_api_first_refused(n: int, history_db: Database) -> None:
    run = RUNS[n]
    events = run["events"]
    tenant = f"tenant_hist_{n}"
    store = job_appender(history_db)
    register_signers(store, tenant, SIGNERS)
    result = import_events(store, tenant, events)
    rejection = run["firstRejection"]
    failure = _chain_failure(events)
    stream_id = events[0]["streamId"]
    if failure is not None:  # refused whole, up front
        assert result.appended == 0 and result.refused is not None and result.refused.index == failure
        assert _stored_ids(history_db, tenant, stream_id) == []
        return
    stop = len(events) if rejection is None else rejection["index"]
    deep = _too_deep(events[:stop])
    if deep is not None:  # settlekit stores at most 256 levels (README, deliberate differences)
        assert (result.appended, result.refused and (result.refused.index, result.refused.code)) == (
            deep, (deep, "JSON_INVALID"))
        assert _stored_ids(history_db, tenant, stream_id) == [e["id"] for e in events[:deep]]
        return
    if rejection is not None and rejection["error"] == "ledger posting rejected":
        # settlekit records a posting error and goes on (README, deliberate differences)
        assert result.appended > stop and _stored_ids(history_db, tenant, stream_id)[:stop + 1] == [
            e["id"] for e in events[:stop + 1]]
        return
    got = (result.appended, None if result.refused is None else result.refused.index)
    assert got == (stop, None if rejection is None else stop), (rejection, result.refused)
    assert _stored_ids(history_db, tenant, stream_id) == [e["id"] for e in events[:stop]]
    stored = store.streams.read_stream(tenant, stream_id)
    assert stored == [recorded_envelope(e, i) for i, e in enumerate(events[:stop])]
