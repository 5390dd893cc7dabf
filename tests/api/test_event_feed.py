"""The event feed (`GET /v1/events`, `GET /v1/events/stream`) on both backends: a client following it through
held-open appends, rollbacks and a server restart sees every committed event of its tenant exactly once, in
order, and none of another tenant's; SSE resume with Last-Event-ID; the per-tenant stream limit."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from settlekit.append import Appender, DomainOutcome, PassThroughDomain
from settlekit.events.envelope import Event
from settlekit.store.consumers import ConsumerRepository
from settlekit.store.db import Database, Tx
from support.api import TENANT_A, TENANT_B, client, event_cursor, key_for, make_app, position_of

ACTOR = {"type": "system", "id": "feed-test"}


class _Rollback(Exception):
    pass


class HoldingDomain(PassThroughDomain):
    """Runs `hook()` inside the append transaction, after the positions were drawn."""

    def __init__(self, hook: Any):
        self.hook = hook

    def process(self, tenant_id: str, stream_id: str, snapshot: dict[str, Any] | None, events: list[Event],
                first_seq: int, may_block: bool = True, *, recorded: bool = False) -> DomainOutcome:
        return DomainOutcome(write=lambda tx, positions: self.hook(tx))


def append(db: Database, tenant: str, stream: str, n: int = 1, domain: Any = None,
           type_: str = "T") -> list[int]:
    store = Appender(db, domain=domain)
    head = store.streams.head(tenant, stream)
    items = [{"type": type_, "actor": ACTOR, "payload": {"i": i}} for i in range(n)]
    return store.append(tenant, stream, items, expected_version=head.seq if head else 0).positions


class Holder:
    """A thread appending one event that stops inside its transaction until released (then commits or rolls
    back)."""

    def __init__(self, db: Database, tenant: str, stream: str, *, rollback: bool):
        self.inside, self.release = threading.Event(), threading.Event()
        self.out: list[Any] = []

        def hook(tx: Tx) -> None:
            self.inside.set()
            self.release.wait(20)
            if rollback:
                raise _Rollback()

        def run() -> None:
            try:
                self.out.append(append(db, tenant, stream, domain=HoldingDomain(hook)))
            except _Rollback:
                self.out.append("rolled back")

        self.thread = threading.Thread(target=run)
        self.thread.start()
        assert self.inside.wait(20)

    def finish(self) -> None:
        self.release.set()
        self.thread.join(20)


class Follower:
    """A feed client: keeps `next` (and, to check it, the position behind it) and every event it was given (by
    the position behind its cursor)."""

    def __init__(self, api: Any, tenant: str = TENANT_A, *, limit: int = 3):
        self.api = api
        self.tenant = tenant
        self.limit = limit
        self.cursor: str | None = None
        self.after = 0
        self.seen: list[tuple[int, str]] = []

    def position(self, token: str) -> int:
        return position_of(self.api.app.state.settlekit.db, self.tenant, token)

    def poll(self) -> int:
        """Page until the feed has nothing more now; returns the number of events received."""
        got = 0
        while True:
            params: dict[str, Any] = {"limit": self.limit}
            if self.cursor is not None:
                params["after"] = self.cursor
            r = self.api.get("/v1/events", params=params)
            assert r.status_code == 200, r.text
            body = r.json()
            self.seen.extend((self.position(item["position"]), item["event"]["id"]) for item in body["events"])
            got += len(body["events"])
            moved = body["next"] != self.cursor
            assert self.position(body["next"]) >= self.after
            self.cursor, self.after = body["next"], self.position(body["next"])
            if not body["events"] and not moved:
                return got

    def poll_until(self, position: int) -> None:
        """Poll until `position` was passed. A rolled-back hole settles once every older transaction of the
        PostgreSQL cluster has ended, so other sessions on the same server may hold the feed back a while."""
        deadline = time.monotonic() + 90
        while self.after < position:
            if time.monotonic() > deadline:
                self._held_back_elsewhere(position)
            self.poll()
            time.sleep(0.02)

    def _held_back_elsewhere(self, position: int) -> None:
        """Skip when a transaction of another database on the server holds the horizon (the tests share the
        server with other sessions); fail otherwise."""
        db: Database = self.api.app.state.settlekit.db
        writer = ConsumerRepository(db).oldest_writer()
        if writer is not None and writer.database != db.url.rsplit("/", 1)[-1]:
            pytest.skip(f"a transaction of database {writer.database} (pid {writer.pid}, {writer.age_seconds:.0f} s "
                        "old) holds the server's horizon, so a rolled-back position cannot settle yet")
        pytest.fail(f"the feed stayed at {self.after}, below {position} (oldest writer: {writer})")


def committed(db: Database, tenant: str) -> list[tuple[int, str]]:
    with db.read() as tx:
        rows = tx.fetchall("SELECT position, event_id FROM events WHERE tenant_id = ? ORDER BY position", (tenant,))
    return [(int(p), str(e)) for p, e in rows]


def shown(db: Database, tenant: str) -> list[tuple[str, str]]:
    """The tenant's committed events as the feed shows them: (position cursor, event id)."""
    return [(event_cursor(db, tenant, p), e) for p, e in committed(db, tenant)]


def concurrent_writers(db: Database) -> bool:
    """Whether a later append can commit while an earlier one is held open (PostgreSQL; SQLite has one writer)."""
    return db.dialect == "postgres"


def _held_then_later(db: Database, follower: Follower, *, rollback: bool) -> None:
    """Hold an append of A open; on PostgreSQL commit a later one meanwhile; the feed must not pass the held
    position until it commits or rolls back."""
    before = follower.after
    holder = Holder(db, TENANT_A, "held", rollback=rollback)
    if concurrent_writers(db):
        later = append(db, TENANT_A, "later")[0]
        append(db, TENANT_B, "b-later")
        follower.poll()
        assert all(p != later for p, _ in follower.seen), "a later event came before the held one settled"
        assert follower.after < later
    else:
        follower.poll()
        assert follower.after == before
    holder.finish()
    assert holder.out == (["rolled back"] if rollback else [holder.out[0]])
    last = committed(db, TENANT_A)[-1][0]
    follower.poll_until(last)


def test_follower_sees_every_committed_event_once_in_order(db: Database) -> None:
    key_a, key_b = key_for(db, TENANT_A, ["jobs:read"]), key_for(db, TENANT_B, ["jobs:read"])
    app = make_app(db)
    follower = Follower(client(app, key_a))
    append(db, TENANT_A, "s1", 2)
    append(db, TENANT_B, "b1", 2)
    append(db, TENANT_A, "s2", 1)
    follower.poll()
    assert follower.seen == committed(db, TENANT_A)

    _held_then_later(db, follower, rollback=False)
    _held_then_later(db, follower, rollback=True)

    # a server restart: a new app (nothing settled in memory yet), the client keeps its position
    follower.api = client(make_app(db), key_a)
    append(db, TENANT_A, "s3", 4)
    append(db, TENANT_B, "b2", 1)
    follower.poll_until(committed(db, TENANT_A)[-1][0])

    expected = committed(db, TENANT_A)
    assert follower.seen == expected, "missed, repeated or reordered events"
    assert len({p for p, _ in follower.seen}) == len(follower.seen)
    b_ids = {e for _, e in committed(db, TENANT_B)}
    assert b_ids and not b_ids & {e for _, e in follower.seen}
    # the other tenant's follower sees only its own
    other = Follower(client(app, key_b), TENANT_B, limit=100)
    other.poll_until(committed(db, TENANT_B)[-1][0])
    assert other.seen == committed(db, TENANT_B)


def test_types_filter_limit_and_envelopes_as_stored(db: Database) -> None:
    api = client(make_app(db), key_for(db, TENANT_A, ["jobs:read"]))
    append(db, TENANT_A, "s1", 2, type_="A")
    append(db, TENANT_A, "s2", 2, type_="B")
    r = api.get("/v1/events", params={"types": "B, C", "limit": 1})
    assert r.status_code == 200
    body = r.json()
    assert [item["event"]["type"] for item in body["events"]] == ["B"]
    assert body["next"] == body["events"][0]["position"]
    position = position_of(db, TENANT_A, body["next"])
    with db.read() as tx:
        stored = tx.scalar("SELECT event_json FROM events WHERE position = ?", (position,))
    assert f'"event":{stored}' in r.text
    rest = api.get("/v1/events", params={"types": "B", "after": body["next"]}).json()
    assert [item["event"]["type"] for item in rest["events"]] == ["B"]
    # past the last B the cursor rests on the tenant's last event of any type
    assert position_of(db, TENANT_A, rest["next"]) == max(p for p, _ in committed(db, TENANT_A))
    too_many = ",".join(f"T{i}" for i in range(60))
    for params in ({"types": "bad type!"}, {"limit": 0}, {"after": "1.5"}, {"types": too_many}):
        r = api.get("/v1/events", params=params)
        assert r.status_code == 400 and r.json()["code"] == "SCHEMA_INVALID", (params, r.text)
    for params, code in (({"after": -1}, "CURSOR_INVALID"), ({"after": 3}, "CURSOR_NUMERIC")):
        r = api.get("/v1/events", params=params)
        assert r.status_code == 400 and r.json()["code"] == code, (params, r.text)
    assert client(make_app(db)).get("/v1/events").status_code == 401


# ---------------------------------------------------------------------------------------------------- SSE


@contextlib.contextmanager
def serving(db: Database, heartbeat: float = 0.2) -> Iterator[tuple[str, Any]]:
    """The API under uvicorn on a loopback port (SSE needs a real server): (base URL, app). On exit the server
    shuts down as `serve` does on SIGTERM (the streams are told to end, then uvicorn stops), open streams and all."""
    import uvicorn

    app = make_app(db, feed_poll_interval=0.05, feed_heartbeat_interval=heartbeat, feed_max_streams_per_tenant=2)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        app.state.settlekit.feed.close()
        server.should_exit = True
        thread.join(30)
        assert not thread.is_alive(), "an open event stream held the shutdown"


@pytest.fixture
def served(db: Database) -> Iterator[tuple[str, Any]]:
    with serving(db) as out:
        yield out


def read_sse(lines: Iterator[str], want: int) -> tuple[list[tuple[str, str]], int]:
    """(id, event id) of the next `want` messages of a stream's lines, and the heartbeat comments seen
    meanwhile."""
    out: list[tuple[str, str]] = []
    heartbeats = 0
    current: dict[str, str] = {}
    for line in lines:
        if line.startswith(": heartbeat"):
            heartbeats += 1
        elif line.startswith("id: "):
            current["id"] = line[4:]
        elif line.startswith("data: "):
            current["data"] = line[6:]
        elif line == "" and "data" in current:
            out.append((current["id"], httpx.Response(200, content=current["data"]).json()["id"]))
            current = {}
            if len(out) == want:
                break
    return out, heartbeats


def test_sse_follows_resumes_with_last_event_id_and_limits_streams(db: Database,
                                                                 served: tuple[str, Any]) -> None:
    base, app = served
    headers = {"authorization": f"Bearer {key_for(db, TENANT_A, ['jobs:read'])}"}
    append(db, TENANT_A, "s1", 3)
    append(db, TENANT_B, "b1", 2)
    expected = shown(db, TENANT_A)
    with httpx.Client(base_url=base, headers=headers, timeout=30) as http:
        with http.stream("GET", "/v1/events/stream") as first:
            assert first.status_code == 200
            assert first.headers["content-type"].startswith("text/event-stream")
            got, _ = read_sse(first.iter_lines(), 2)
        assert got == expected[:2]
        # resume: the id of the last message received; new events arrive while connected
        resume = {"Last-Event-ID": got[-1][0]}
        with http.stream("GET", "/v1/events/stream", params={"after": 0}, headers=resume) as second:
            lines = second.iter_lines()
            rest, _ = read_sse(lines, 1)
            assert rest == expected[2:3]
            holder = Holder(db, TENANT_A, "held", rollback=False) if db.dialect == "postgres" else None
            append(db, TENANT_A, "s2", 2)
            if holder is not None:
                holder.finish()
            more, heartbeats = read_sse(lines, 3 if holder else 2)
        assert got + rest + more == shown(db, TENANT_A)
        with http.stream("GET", "/v1/events/stream", headers={"Last-Event-ID": more[-1][0]}) as quiet:
            quiet_lines = quiet.iter_lines()  # kept: an abandoned line iterator closes the connection
            assert read_sse_heartbeat(quiet_lines)
            with http.stream("GET", "/v1/events/stream") as also:
                assert also.status_code == 200
                with http.stream("GET", "/v1/events/stream") as third:
                    assert third.status_code == 429
                    third.read()
                    assert third.json()["code"] == "FEED_STREAM_LIMIT" and int(third.headers["retry-after"]) >= 1
        for last_event_id, code in (("x1", "CURSOR_INVALID"), ("x.1", "CURSOR_INVALID"), ("7", "CURSOR_NUMERIC")):
            r = http.get("/v1/events/stream", headers={"Last-Event-ID": last_event_id})
            assert r.status_code == 400 and r.json()["code"] == code, (last_event_id, r.text)
    deadline = time.monotonic() + 10
    while app.state.settlekit.feed.open_count(TENANT_A):  # the server notices closed connections
        assert time.monotonic() < deadline, "a closed stream kept its slot"
        time.sleep(0.02)


def read_sse_heartbeat(lines: Iterator[str]) -> bool:
    """True once a heartbeat comment arrives on a stream with nothing to send."""
    return any(line.startswith(": heartbeat") for line in lines)  # `lines` stays open: the caller holds it


def test_feed_listener_is_a_session_of_its_own(pg_url: str) -> None:
    """PostgreSQL: the feed's LISTEN session is its own, so the dispatcher's wait and the feed's both see an
    append's notification."""
    from settlekit.store.db import connect

    db = connect(pg_url)
    try:
        listener = db.event_listener()
        listener.wait(0)  # opens the session and LISTENs
        db.wait_for_notify(0)  # and the database's own (the dispatcher's)
        append(db, TENANT_A, "s1")
        assert listener.wait(30) and db.wait_for_notify(30)
        listener.close()
    finally:
        db.close()


def test_sse_stream_ends_at_shutdown_and_resumes_on_the_next_server(db: Database) -> None:
    """A client following the stream through a server restart: the open stream ends when the server stops, and
    the next server's stream, resumed with Last-Event-ID, sends exactly what came after."""
    headers = {"authorization": f"Bearer {key_for(db, TENANT_A, ['jobs:read'])}"}
    append(db, TENANT_A, "s1", 2)
    seen: list[tuple[str, str]] = []
    ended = threading.Event()
    # the stream is closed on this side only after the server has stopped (closing it first would end it here)
    with contextlib.ExitStack() as client_side:
        http = client_side.enter_context(httpx.Client(headers=headers, timeout=30))
        with serving(db) as (base, _):
            stream = client_side.enter_context(http.stream("GET", f"{base}/v1/events/stream"))
            lines = stream.iter_lines()
            seen += read_sse(lines, 2)[0]

            def drain() -> None:
                with contextlib.suppress(httpx.HTTPError):
                    for _ in lines:
                        pass
                ended.set()

            reader = threading.Thread(target=drain, daemon=True)
            reader.start()
        reader.join(30)
        assert ended.is_set(), "the open stream did not end with the server"
    append(db, TENANT_A, "s2", 2)  # while no server runs
    append(db, TENANT_B, "b1", 1)
    with serving(db) as (base, _), httpx.Client(base_url=base, headers=headers, timeout=30) as http, \
            http.stream("GET", "/v1/events/stream", headers={"Last-Event-ID": seen[-1][0]}) as stream:
        seen += read_sse(stream.iter_lines(), 2)[0]
    assert seen == shown(db, TENANT_A)


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_reader_stops_before_a_lower_position_that_commits_late(pg_url: str, outcome: str) -> None:
    """PostgreSQL, the dispatcher's hard interleaving: B takes its transaction id first, then A draws position p
    and holds it, then B draws p + 1 and commits. The reader must not pass p until A has ended; then it passes
    it once, with A's event when A committed."""
    import psycopg

    from settlekit.dispatch.feed import FeedReader
    from settlekit.store.db import connect

    db = connect(pg_url)
    try:
        reader = FeedReader(db)
        conn_b = psycopg.connect(pg_url, autocommit=False)
        conn_b.execute("SELECT pg_current_xact_id()")
        holder = Holder(db, TENANT_A, "held", rollback=outcome == "rollback")
        p_b = conn_b.execute(
            "INSERT INTO events (tenant_id, stream_type, stream_id, seq, event_id, type, at, payload_hash,"
            " chain_hash, event_json, txid, batch_id) VALUES (%s, 'generic', 'sB', 1, 'evt_b', 'T',"
            " '2026-01-01T00:00:00.000Z', 'x', 'ch_b', '{\"id\":\"evt_b\",\"type\":\"T\"}', pg_current_xact_id(),"
            " gen_random_uuid()) RETURNING position", (TENANT_A,)).fetchone()[0]
        conn_b.commit()
        conn_b.close()
        page = reader.read(TENANT_A, 0)
        assert page.events == [] and page.next < p_b - 1, "passed a position that may still commit"
        holder.finish()
        deadline = time.monotonic() + 90
        positions: list[int] = []
        after = 0
        while after < p_b:
            if time.monotonic() > deadline:
                pytest.skip("another session holds the server's horizon")
            page = reader.read(TENANT_A, after)
            positions += [e.position for e in page.events]
            after = page.next
            time.sleep(0.02)
        assert positions == ([p_b - 1, p_b] if outcome == "commit" else [p_b])
    finally:
        db.close()


def test_a_stream_ends_within_a_heartbeat_interval_of_its_key_being_revoked(db: Database) -> None:
    """An open stream asks every heartbeat interval whether its key is still active: revoking a leaked key cuts
    its live feed too (before, the stream went on sending every new event of the tenant)."""
    from settlekit.api.auth import create_api_key, revoke_api_key

    key_id, secret = create_api_key(db, TENANT_A, ["jobs:read"])
    append(db, TENANT_A, "s1", 1)
    headers = {"authorization": f"Bearer {secret}"}
    with serving(db) as (base, _app), httpx.Client(base_url=base, headers=headers, timeout=3.0) as http, \
            http.stream("GET", "/v1/events/stream") as stream:
        assert stream.status_code == 200
        lines = stream.iter_lines()
        assert len(read_sse(lines, 1)[0]) == 1
        revoke_api_key(db, key_id)
        assert http.get("/v1/events").status_code == 401
        append(db, TENANT_A, "s1", 1)  # the key is asked again before this page, and at the next heartbeat
        received, ended, deadline = [], False, time.monotonic() + 5
        with contextlib.suppress(httpx.ReadTimeout, httpx.RemoteProtocolError, httpx.StreamClosed):
            for line in lines:  # heartbeats arrive every 0.2 s while the stream lives
                received += [line] if line.startswith("id:") else []
                if time.monotonic() > deadline:
                    break
            else:
                ended = True
        assert received == [] and ended


def test_a_revoked_key_receives_no_event_committed_after_its_revocation(db: Database) -> None:
    """The key is asked again before each page of events is sent, not only every heartbeat interval (15 s by
    default): an event appended right after the revocation is not sent, and the stream ends."""
    from settlekit.api.auth import create_api_key, revoke_api_key

    key_id, secret = create_api_key(db, TENANT_A, ["jobs:read"])
    append(db, TENANT_A, "s1", 1)
    headers = {"authorization": f"Bearer {secret}"}
    with serving(db, heartbeat=300.0) as (base, _app), \
            httpx.Client(base_url=base, headers=headers, timeout=30.0) as http, \
            http.stream("GET", "/v1/events/stream") as stream:
        lines = stream.iter_lines()
        assert len(read_sse(lines, 1)[0]) == 1
        revoke_api_key(db, key_id)
        append(db, TENANT_A, "s1", 1)
        received = [line for line in lines if line.startswith("id:")]  # until the stream ends (30 s read guard)
    assert received == []
