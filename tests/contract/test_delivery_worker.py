"""Delivery store and worker on both backends (`db` fixture from conftest), against a real receiver."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from settlekit.delivery.enqueue import enqueue_artifact
from settlekit.delivery.errors import QuotaExceededError
from settlekit.delivery.retry import RetryPolicy
from settlekit.delivery.secrets import SecretRefError, SecretResolver, store_secret
from settlekit.delivery.sender import SenderConfig
from settlekit.delivery.signing import generate_secret
from settlekit.delivery.worker import DeliveryPassResult, DeliveryWorker, WorkerConfig
from settlekit.errors import ConfigurationError, ConflictError
from settlekit.events.canonical import canonical_hash
from settlekit.store import deliveries as store
from settlekit.store.db import Database, Tx
from support.receiver import FaultyReceiver

T0 = datetime(2026, 1, 2, tzinfo=UTC)
SECRET = generate_secret()


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def artifact(
    job: str, version: int, a_type: str = "WorkCertificate.v1", tenant: str = "ten"
) -> dict[str, Any]:
    prefix = {"WorkCertificate.v1": "cert", "SettlementStatement.v1": "settlement"}.get(a_type, "x")
    doc: dict[str, Any] = {
        "schemaVersion": a_type,
        "artifactType": a_type,
        "artifactId": f"{prefix}_{job}_evt_{version}",
        "tenantId": tenant,
        "jobId": job,
        "jobVersion": version,
    }
    if a_type == "SettlementStatement.v1":
        doc["settlement"] = {"totalsByAccountId": {"acct_cash": 100, "acct_owner_payable": -100}}
    doc["artifactHash"] = canonical_hash(doc)
    return doc


class Artifacts:
    """In-memory artifact loader standing in for the artifacts table."""

    def __init__(self) -> None:
        self.docs: dict[tuple[str, str], dict[str, Any]] = {}

    def add(self, doc: dict[str, Any]) -> dict[str, Any]:
        self.docs[(doc["tenantId"], doc["artifactId"])] = doc
        return doc

    def __call__(self, tx: Tx, tenant_id: str, artifact_id: str) -> Mapping[str, Any] | None:
        return self.docs.get((tenant_id, artifact_id))


@pytest.fixture
def secret_file(tmp_path: Path) -> str:
    path = tmp_path / "whsec.txt"
    path.write_text(SECRET + "\n", encoding="utf-8")
    return f"file:{path}"


@pytest.fixture
def rx() -> Iterator[FaultyReceiver]:
    with FaultyReceiver(secrets=[SECRET], tolerance_seconds=10**10) as server:
        yield server


def add_destination(db: Database, url: str, secret_ref: str, **kw: Any) -> store.Destination:
    """A destination row. A `file:` ref to an existing file is stored as the tenant's database secret (workers
    never read files); other refs are kept as given."""
    tenant = kw.get("tenant_id", "ten")
    scheme, _, path = secret_ref.partition(":")
    if scheme == "file" and Path(path).is_file():
        with db.transaction() as tx:
            secret_ref = store_secret(tx, tenant, Path(path).read_text(encoding="utf-8"))
    dest = store.Destination(
        tenant_id=kw.pop("tenant_id", "ten"),
        destination_id=kw.pop("destination_id", "d1"),
        url=url,
        secret_ref=secret_ref,
        **kw,
    )
    with db.transaction() as tx:
        store.put_destination(tx, dest, now=T0)
    return dest


def enqueue(db: Database, arts: Artifacts, doc: dict[str, Any], now: datetime = T0) -> int:
    arts.add(doc)
    with db.transaction() as tx:
        return enqueue_artifact(tx, doc["tenantId"], doc, now=now)


def make_worker(db: Database, arts: Artifacts, clock: Clock, **cfg: Any) -> DeliveryWorker:
    config = WorkerConfig(
        allow_insecure_http=True,
        allow_loopback=True,
        sender=SenderConfig(timeout=2.0, connect_timeout=1.0),
        retry=cfg.pop("retry", RetryPolicy(base=2, cap=60, max_attempts=3, jitter="none")),
        **cfg,
    )
    return DeliveryWorker(db, artifact_loader=arts, config=config, clock=clock, worker_id=cfg.get("id", "w1"))


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def one_pass(worker: DeliveryWorker) -> DeliveryPassResult:
    async with worker:
        return await worker.run_once()


def deliveries(db: Database, tenant: str = "ten", **kw: Any) -> list[store.Delivery]:
    with db.read() as tx:
        return store.list_deliveries(tx, tenant, **kw)


# --- store --------------------------------------------------------------------------------------------------


def test_enqueue_filters_and_is_idempotent(db: Database) -> None:
    arts = Artifacts()
    add_destination(db, "https://a.example/", "file:/x", destination_id="all")
    add_destination(
        db,
        "https://b.example/",
        "file:/x",
        destination_id="settle_only",
        artifact_types=("SettlementStatement.v1",),
    )
    add_destination(db, "https://c.example/", "file:/x", destination_id="off", status="disabled")
    add_destination(db, "https://d.example/", "file:/x", destination_id="other_tenant", tenant_id="zzz")
    cert, settle = artifact("j1", 3), artifact("j1", 3, "SettlementStatement.v1")
    assert enqueue(db, arts, cert) == 1
    assert enqueue(db, arts, settle) == 2
    assert enqueue(db, arts, settle) == 0  # reused artifact: no new rows
    rows = deliveries(db)
    assert [(r.destination_id, r.artifact_type) for r in rows] == [
        ("all", "WorkCertificate.v1"),
        ("all", "SettlementStatement.v1"),
        ("settle_only", "SettlementStatement.v1"),
    ]
    r = rows[1]
    assert r.dedupe_key == f"ten:all:SettlementStatement.v1:{settle['artifactId']}:{settle['artifactHash']}"
    assert r.message_id.startswith("dlv_") and len(r.message_id) == 36
    assert (r.scope_key, r.order_seq, r.priority, r.state, r.attempts) == ("j1", 3, 40, "pending", 0)
    with db.transaction() as tx, pytest.raises(QuotaExceededError):
        enqueue_artifact(tx, "ten", artifact("j2", 1), now=T0, max_pending=3)


def test_claim_lease_expiry_and_guarded_completion(db: Database) -> None:
    arts = Artifacts()
    add_destination(db, "https://a.example/", "file:/x")
    for v in (1, 2, 3):
        enqueue(db, arts, artifact(f"j{v}", v))
    lease = timedelta(seconds=60)
    with db.transaction() as tx:
        a = store.claim(tx, worker="A", limit=2, lease=lease, now=T0)
    with db.transaction() as tx:
        b = store.claim(tx, worker="B", limit=10, lease=lease, now=T0)
    assert [d.artifact_id for d in a] == ["cert_j1_evt_1", "cert_j2_evt_2"]
    assert [d.artifact_id for d in b] == ["cert_j3_evt_3"]
    assert all(d.attempts == 0 and d.lease_owner == "A" for d in a)  # a claim is not an attempt
    with db.transaction() as tx:
        assert store.claim(tx, worker="C", limit=10, lease=lease, now=T0 + timedelta(seconds=59)) == []
    # A crashed: its leases expire and C takes over
    c: list[store.Delivery] = []
    for _ in range(2):  # a delivery claimed before without an outcome is claimed alone
        with db.transaction() as tx:
            c += store.claim(tx, worker="C", limit=2, lease=lease, now=T0 + timedelta(seconds=61))
    assert [d.id for d in c] == [d.id for d in a] and all(d.attempts == 0 for d in c)  # the crash cost none
    assert all(d.claims == 2 for d in c)
    with db.transaction() as tx:
        # A's late completion is refused, C's is applied
        assert not store.mark_delivered(tx, a[0].id, "A", status=200, now=T0, retention=timedelta(days=1))
        assert store.mark_delivered(tx, c[0].id, "C", status=200, now=T0, retention=timedelta(days=1))
        assert not store.mark_delivered(tx, c[0].id, "C", status=200, now=T0, retention=timedelta(days=1))
    row = deliveries(db)[0]
    assert (row.state, row.last_status, row.lease_owner, row.delivered_at) == ("delivered", 200, None, T0)
    assert row.attempts == 1  # the recorded outcome counted


def test_strict_scope_ordering(db: Database) -> None:
    arts = Artifacts()
    add_destination(db, "https://a.example/", "file:/x", destination_id="strict", ordering="strict_scope")
    add_destination(db, "https://b.example/", "file:/x", destination_id="loose")
    enqueue(db, arts, artifact("job", 2, "SettlementStatement.v1"))  # later artifact first, lower priority
    enqueue(db, arts, artifact("job", 2))
    enqueue(db, arts, artifact("job", 1))
    enqueue(db, arts, artifact("other", 1))
    lease = timedelta(seconds=60)

    def claim(now: datetime) -> list[tuple[str, str]]:
        with db.transaction() as tx:
            got = store.claim(tx, worker="w", limit=100, lease=lease, now=now)
            return [(d.destination_id, d.artifact_id) for d in got]

    first = claim(T0)
    strict = [a for dst, a in first if dst == "strict"]
    loose = [a for dst, a in first if dst == "loose"]
    assert strict == ["cert_job_evt_1", "cert_other_evt_1"]  # one head per scope
    assert sorted(loose) == sorted(
        ["cert_job_evt_1", "cert_job_evt_2", "settlement_job_evt_2", "cert_other_evt_1"]
    )  # best effort: no head-of-line blocking

    head = next(d for d in deliveries(db, destination_id="strict") if d.artifact_id == "cert_job_evt_1")
    others = deliveries(db)
    with db.transaction() as tx:  # everything else claimed so far is delivered
        for d in others:
            if d.lease_owner == "w" and d.id != head.id:
                store.mark_delivered(tx, d.id, "w", status=200, now=T0, retention=timedelta(days=1))
    with db.transaction() as tx:  # the head backs off; the scope stays blocked past its lease
        store.mark_retry(
            tx, head.id, "w", status=500, error="non_2xx", next_attempt_at=T0 + timedelta(hours=1), now=T0
        )
    assert claim(T0 + timedelta(minutes=5)) == []
    # the head fails for good: a failed delivery does not block; next by (order_seq, priority)
    with db.transaction() as tx:
        tx.execute("UPDATE deliveries SET state = 'failed' WHERE id = ?", (head.id,))
    assert claim(T0 + timedelta(minutes=6)) == [("strict", "cert_job_evt_2")]
    nxt = next(d for d in deliveries(db, destination_id="strict") if d.artifact_id == "cert_job_evt_2")
    with db.transaction() as tx:
        store.mark_delivered(tx, nxt.id, "w", status=200, now=T0, retention=timedelta(days=1))
    assert claim(T0 + timedelta(minutes=7)) == [("strict", "settlement_job_evt_2")]


def test_requeue_and_cleanup(db: Database) -> None:
    arts = Artifacts()
    add_destination(db, "https://a.example/", "file:/x")
    enqueue(db, arts, artifact("j", 1))
    enqueue(db, arts, artifact("k", 1))
    with db.transaction() as tx:
        a, b = store.claim(tx, worker="w", limit=10, lease=timedelta(seconds=60), now=T0)
        store.mark_failed(tx, a.id, "w", status=500, error="non_2xx", now=T0, retention=timedelta(days=1))
        store.mark_delivered(tx, b.id, "w", status=200, now=T0, retention=timedelta(days=1))
    with db.transaction() as tx:
        with pytest.raises(ConflictError):
            store.requeue(tx, "ten", delivery_id=b.id, now=T0)
        assert store.requeue(tx, "ten", delivery_id=a.id, now=T0 + timedelta(hours=1)) == 1
    again = deliveries(db, state="pending")
    assert [(d.id, d.attempts, d.message_id) for d in again] == [(a.id, 0, a.message_id)]
    assert again[0].next_attempt_at == T0 + timedelta(hours=1)
    with db.transaction() as tx:
        assert store.cleanup_expired(tx, now=T0 + timedelta(days=2)) == 1  # the delivered one
        assert store.pending_counts(tx) == {"pending": 1}


# --- worker -------------------------------------------------------------------------------------------------


def test_worker_delivers_retries_and_fails_to_dlq(db: Database, rx: FaultyReceiver, secret_file: str) -> None:
    arts, clock = Artifacts(), Clock()
    add_destination(db, rx.url, secret_file)
    good, flaky = artifact("a", 1), artifact("b", 1)
    enqueue(db, arts, good)
    enqueue(db, arts, flaky)
    rx.inject(500, count=3)  # both fail on the first pass, one of them once more
    worker = make_worker(db, arts, clock)

    async def scenario() -> list[DeliveryPassResult]:
        results = []
        async with worker:
            results.append(await worker.run_once())
            clock.advance(1)
            results.append(await worker.run_once())  # nothing due yet (backoff 2 s)
            clock.advance(2)
            results.append(await worker.run_once())
            clock.advance(4)
            results.append(await worker.run_once())
        return results

    r1, r2, r3, r4 = run(scenario())
    assert (r1.claimed, r1.retried) == (2, 2)
    assert r2.claimed == 0
    assert (r3.claimed, r3.delivered, r3.retried) == (2, 1, 1)
    assert (r4.claimed, r4.delivered) == (1, 1)
    rows = deliveries(db)
    assert {d.state for d in rows} == {"delivered"}
    assert sorted(d.attempts for d in rows) == [2, 3]
    assert len(rx.received) == 2
    with db.read() as tx:
        attempts = store.list_attempts(tx, rows[0].id) + store.list_attempts(tx, rows[1].id)
    assert sorted(s for _, s, _ in attempts) == [200, 200, 500, 500, 500]

    # a receiver that keeps failing: max_attempts (3) → failed with its reason; requeue → delivered
    late = artifact("c", 1)
    enqueue(db, arts, late, now=clock.now)
    rx.inject(503, count=3)

    async def until_failed() -> None:
        async with make_worker(db, arts, clock) as w:
            for _ in range(3):
                await w.run_once()
                clock.advance(120)

    run(until_failed())
    (dead,) = deliveries(db, state="failed")
    assert (dead.attempts, dead.last_status, dead.last_error) == (3, 503, "non_2xx")
    with db.transaction() as tx:
        store.requeue(tx, "ten", delivery_id=dead.id, now=clock.now)
    assert run(one_pass(make_worker(db, arts, clock))).delivered == 1
    assert deliveries(db, state="delivered")[-1].message_id == dead.message_id
    assert rx.received[dead.message_id]["artifactId"] == "cert_c_evt_1"


def test_worker_logs_each_failed_attempt_without_the_url(db: Database, rx: FaultyReceiver, secret_file: str,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """A retried attempt is an info line, a given-up delivery a warning, a success only a debug line; none names
    the destination's URL (it may carry credentials)."""
    arts, clock = Artifacts(), Clock()
    add_destination(db, f"{rx.url}?token=s3cret", secret_file)
    enqueue(db, arts, artifact("a", 1))
    rx.inject(500, count=2)
    worker = make_worker(db, arts, clock, retry=RetryPolicy(base=2, cap=60, max_attempts=2, jitter="none"))

    async def scenario() -> None:
        async with worker:
            await worker.run_once()
            clock.advance(5)
            await worker.run_once()

    with caplog.at_level(logging.DEBUG, logger="settlekit.delivery"):
        run(scenario())
    lines = [r for r in caplog.records if r.getMessage() == "delivery attempt"]
    assert [(r.levelno, r.attempt, r.outcome, r.httpStatus, r.reason) for r in lines] == [  # type: ignore[attr-defined]
        (logging.INFO, 1, "retried", 500, "non_2xx"), (logging.WARNING, 2, "failed", 500, "non_2xx")]
    assert lines[0].retryInSeconds == 2  # type: ignore[attr-defined]
    assert "s3cret" not in caplog.text and all("s3cret" not in str(vars(r)) for r in caplog.records)

    caplog.clear()
    enqueue(db, arts, artifact("b", 1), now=clock.now)
    with caplog.at_level(logging.INFO, logger="settlekit.delivery"):
        assert run(one_pass(make_worker(db, arts, clock))).delivered == 1
    assert not [r for r in caplog.records if r.getMessage() == "delivery attempt"]


def test_worker_honours_retry_after(db: Database, rx: FaultyReceiver, secret_file: str) -> None:
    arts, clock = Artifacts(), Clock()
    add_destination(db, rx.url, secret_file)
    enqueue(db, arts, artifact("a", 1))
    rx.inject(429, retry_after=600)
    assert run(one_pass(make_worker(db, arts, clock))).retried == 1
    (d,) = deliveries(db)
    assert d.next_attempt_at == T0 + timedelta(seconds=600)
    assert (d.last_status, d.last_error) == (429, "non_2xx")


def test_worker_410_disables_destination(db: Database, rx: FaultyReceiver, secret_file: str) -> None:
    arts, clock = Artifacts(), Clock()
    add_destination(db, rx.url, secret_file, ordering="strict_scope")
    enqueue(db, arts, artifact("a", 1))
    enqueue(db, arts, artifact("a", 2))
    rx.inject(410)
    result = run(one_pass(make_worker(db, arts, clock)))
    assert (result.claimed, result.disabled) == (1, 1)
    with db.read() as tx:
        dest = store.get_destination(tx, "ten", "d1")
    assert dest is not None and (dest.status, dest.disabled_reason) == ("disabled", "gone")
    states = [(d.state, d.last_error) for d in deliveries(db)]
    assert states == [("failed", "gone"), ("pending", None)]
    clock.advance(3600)
    assert run(one_pass(make_worker(db, arts, clock))).claimed == 0  # not claimed while disabled
    with db.transaction() as tx:
        store.set_destination_status(tx, "ten", "d1", status="active", reason=None, now=clock.now)
    assert run(one_pass(make_worker(db, arts, clock))).delivered == 1


def test_worker_local_failures(db: Database, rx: FaultyReceiver, tmp_path: Path) -> None:
    arts, clock = Artifacts(), Clock()
    add_destination(db, rx.url, f"file:{tmp_path / 'missing.txt'}", destination_id="nosecret")
    add_destination(db, "http://10.0.0.1/", "inline:" + SECRET, destination_id="private")
    doc = artifact("a", 1)
    enqueue(db, arts, doc)
    orphan = artifact("b", 1)
    with db.transaction() as tx:
        enqueue_artifact(tx, "ten", orphan, now=T0)  # never stored: missing artifact
    worker = DeliveryWorker(
        db,
        artifact_loader=arts,
        config=WorkerConfig(allow_insecure_http=True, sender=SenderConfig(timeout=2.0)),
        clock=clock,
        secret_resolver=SecretResolver(allow_inline=True),
    )
    result = run(one_pass(worker))
    assert (result.retried, result.disabled) == (3, 1)
    errors = sorted((d.destination_id, d.artifact_id, d.last_error) for d in deliveries(db))
    assert errors == [
        ("nosecret", "cert_a_evt_1", "secret_file_refused"),
        ("nosecret", "cert_b_evt_1", "missing_artifact"),
        ("private", "cert_a_evt_1", "ssrf_blocked"),
        ("private", "cert_b_evt_1", "missing_artifact"),
    ]
    assert rx.requests == []


def test_a_claim_reads_each_destinations_secrets_once(db: Database, rx: FaultyReceiver, secret_file: str,
                                                      tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The deliveries of one claim to the same destination are signed with secrets read once; a destination whose
    secret cannot be read fails each of its deliveries with the same reason."""
    arts, clock = Artifacts(), Clock()
    add_destination(db, rx.url, secret_file)
    add_destination(db, rx.url, f"file:{tmp_path / 'missing.txt'}", destination_id="nosecret")
    for name in "abcd":
        enqueue(db, arts, artifact(name, 1))
    worker = make_worker(db, arts, clock)
    reads: list[str] = []
    read = SecretResolver.for_destination

    def counted(resolver: SecretResolver, tx: Tx, dest: store.Destination, now: datetime) -> list[str]:
        reads.append(dest.destination_id)
        return read(resolver, tx, dest, now)

    monkeypatch.setattr(SecretResolver, "for_destination", counted)
    result = run(one_pass(worker))
    assert sorted(reads) == ["d1", "nosecret"]
    assert (result.claimed, result.delivered) == (8, 4)
    assert len(rx.received) == 4
    failed = [d.last_error for d in deliveries(db) if d.destination_id == "nosecret"]
    assert failed == ["secret_file_refused"] * 4


def test_concurrent_workers_never_share_a_row(db: Database) -> None:
    arts = Artifacts()
    add_destination(db, "https://a.example/", "file:/x")
    for i in range(60):
        enqueue(db, arts, artifact(f"j{i}", 1))
    claimed: dict[str, list[int]] = {}
    errors: list[BaseException] = []

    def claimer(name: str) -> None:
        try:
            mine: list[int] = []
            while True:
                with db.transaction() as tx:
                    got = store.claim(tx, worker=name, limit=4, lease=timedelta(seconds=60), now=T0)
                if not got:
                    break
                mine += [d.id for d in got]
            claimed[name] = mine
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    ids = [i for mine in claimed.values() for i in mine]
    assert len(ids) == 60 and len(set(ids)) == 60


def test_lease_must_outlast_its_renewal_interval(db: Database) -> None:
    with pytest.raises(ConfigurationError) as exc:
        DeliveryWorker(db, artifact_loader=Artifacts(),
                       config=WorkerConfig(lease=timedelta(seconds=3), lease_renew=2.5))
    assert exc.value.code == "DELIVERY_LEASE_TOO_SHORT"
    with pytest.raises(ConfigurationError):
        DeliveryWorker(db, artifact_loader=Artifacts(), config=WorkerConfig(lease_renew=0))
    # the lease no longer has to cover the HTTP timeout: it is renewed while the request is in flight
    cfg = WorkerConfig(sender=SenderConfig(timeout=15))
    assert (cfg.lease.total_seconds(), cfg.renew_interval) == (10.0, 3.0)
    DeliveryWorker(db, artifact_loader=Artifacts(), config=cfg)


def test_secret_resolver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "s.txt"
    f.write_text("whsec_old\n\nwhsec_new\n", encoding="utf-8")
    for file_ref in (f"file:{f}", f"file:{tmp_path / 'nope'}", "file:/etc/shadow", "file:relative.txt"):
        with pytest.raises(SecretRefError) as refused:  # never read: the same answer whatever the file
            SecretResolver(allow_env=True, allow_inline=True).resolve(file_ref)
        assert (refused.value.reason, refused.value.code) == ("secret_file_refused", "SECRET_FILE_REFUSED")
        assert refused.value.details.get("path") is None
    monkeypatch.setenv("SK_TEST_SECRET", "whsec_env")
    assert SecretResolver(allow_env=True).resolve("env:SK_TEST_SECRET") == ["whsec_env"]
    for ref, reason, resolver in [
        ("env:SK_TEST_SECRET", "secret_provider_forbidden", SecretResolver()),
        ("inline:whsec_x", "secret_provider_forbidden", SecretResolver()),
        ("vault:x", "secret_ref_invalid", SecretResolver()),
        ("whsec_plain", "secret_ref_invalid", SecretResolver()),
        ("env:SK_TEST_UNSET_VAR", "secret_not_found", SecretResolver(allow_env=True)),
    ]:
        with pytest.raises(SecretRefError) as exc:
            resolver.resolve(ref)
        assert exc.value.reason == reason, ref
