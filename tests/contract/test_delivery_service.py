"""Destination/delivery service functions, SSRF refusals on save, the CLI, the artifacts sink and loader,
metrics and the `settlekit.webhooks` re-exports."""

from __future__ import annotations

import json
import os
import stat
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from test_delivery_worker import SECRET, T0, Artifacts, Clock, artifact, enqueue, one_pass, run
from typer.testing import CliRunner

from settlekit.application import destinations
from settlekit.cli import app
from settlekit.delivery.errors import DestinationForbiddenError, QuotaExceededError
from settlekit.delivery.metrics import register_queue_collector
from settlekit.delivery.retry import RetryPolicy
from settlekit.delivery.secrets import SecretRefError
from settlekit.delivery.sender import SenderConfig
from settlekit.delivery.sink import ArtifactRowError, WebhookDeliverySink, artifact_loader
from settlekit.delivery.worker import DeliveryWorker, WorkerConfig
from settlekit.errors import ConflictError, NotFoundError, ValidationError
from settlekit.store import deliveries as store
from settlekit.store.db import Database
from support.receiver import FaultyReceiver

PUBLIC = ["93.184.216.34"]


def public_dns(host: str, port: int) -> list[str]:
    return PUBLIC


@pytest.fixture
def secret_path(tmp_path: Path) -> Path:
    p = tmp_path / "whsec.txt"
    p.write_text(SECRET + "\n", encoding="utf-8")
    return p


def policy(**kw: Any) -> destinations.DestinationPolicy:
    kw.setdefault("resolver", public_dns)
    return destinations.DestinationPolicy(**kw)


# --- destinations -------------------------------------------------------------------------------------------


def test_add_list_disable_enable(db: Database, secret_path: Path) -> None:
    dest = destinations.add_destination(
        db,
        "ten",
        "hooks",
        url="https://hooks.example/in",
        secret_ref="", secret_value=SECRET,
        artifact_types=["SettlementStatement.v1"],
        ordering="strict_scope",
        policy=policy(),
        now=T0,
    )
    assert (dest.status, dest.ordering, dest.artifact_types) == ("active", "strict_scope", ("SettlementStatement.v1",))
    with pytest.raises(ConflictError):
        destinations.add_destination(
            db, "ten", "hooks", url="https://x.example/", secret_ref="", secret_value=SECRET,
                            policy=policy()
        )
    replaced = destinations.add_destination(
        db, "ten", "hooks", url="https://x.example/", secret_ref="", secret_value=SECRET,
                            policy=policy(),
        replace=True,
    )
    assert replaced.url == "https://x.example/" and replaced.artifact_types is None
    assert [d.destination_id for d in destinations.list_destinations(db, "ten")] == ["hooks"]
    assert destinations.list_destinations(db, "other") == []
    registry = CollectorRegistry()
    off = destinations.disable_destination(db, "ten", "hooks", registry=registry)
    assert (off.status, off.disabled_reason) == ("disabled", "operator")
    assert registry.get_sample_value("settlekit_destinations_disabled_total", {"reason": "operator"}) == 1
    on = destinations.enable_destination(db, "ten", "hooks", policy=policy())
    assert (on.status, on.disabled_reason) == ("active", None)
    with pytest.raises(NotFoundError):
        destinations.disable_destination(db, "ten", "nope")
    with pytest.raises(NotFoundError):
        destinations.get_destination(db, "other", "hooks")


@pytest.mark.parametrize(
    ("url", "dns", "category"),
    [
        ("https://127.0.0.1/", None, "loopback"),
        ("https://[::1]/", None, "loopback"),
        ("https://10.1.2.3/", None, "private"),
        ("https://169.254.169.254/latest/meta-data", None, "metadata"),
        ("https://hooks.example/", ["93.184.216.34", "192.168.1.20"], "private"),  # any bad address
        ("https://hooks.example/", ["::ffff:127.0.0.1"], "loopback"),
        ("https://hooks.example/", ["fe80::1"], "link_local"),
    ],
)
def test_ssrf_refusals_on_save(
    db: Database, secret_path: Path, url: str, dns: list[str] | None, category: str
) -> None:
    pol = policy(resolver=(lambda h, p: dns) if dns else public_dns)
    with pytest.raises(DestinationForbiddenError) as exc:
        destinations.add_destination(db, "ten", "d", url=url, secret_ref="", secret_value=SECRET,
                            policy=pol)
    assert exc.value.code == "DESTINATION_URL_FORBIDDEN"
    if dns is None:
        assert exc.value.details["category"] == category
    else:  # what a host name resolves to is not told (it may be an internal name): only the log names it
        assert set(exc.value.details) == {"host", "reason", "url"} and not any(a in exc.value.message for a in dns)
    assert destinations.list_destinations(db, "ten") == []  # nothing saved


def test_ssrf_policy_allowances_on_save(db: Database, secret_path: Path) -> None:
    with pytest.raises(DestinationForbiddenError):  # plain http needs allow_insecure_http
        destinations.add_destination(db, "ten", "a", url="http://hooks.example/", secret_ref="", secret_value=SECRET,
                            policy=policy())
    with pytest.raises(DestinationForbiddenError):  # loopback needs the local policy
        destinations.add_destination(db, "ten", "a", url="http://127.0.0.1:9/", secret_ref="", secret_value=SECRET,
                                policy=policy(allow_insecure_http=True))
    destinations.add_destination(db, "ten", "a", url="http://127.0.0.1:9/", secret_ref="", secret_value=SECRET,
                            policy=destinations.DestinationPolicy.local())
    private = policy(resolver=lambda h, p: ["10.0.0.7"], allow_private_network=True)
    destinations.add_destination(db, "ten", "b", url="https://internal.example/", secret_ref="", secret_value=SECRET,
                            policy=private,
                            allow_private_network=True)
    with pytest.raises(DestinationForbiddenError):  # metadata stays blocked even on a private destination
        destinations.add_destination(db, "ten", "c", url="https://169.254.169.254/", secret_ref="", secret_value=SECRET,
                                policy=policy(allow_private_network=True), allow_private_network=True)
    with pytest.raises(DestinationForbiddenError):  # whatever the deployment lists
        destinations.add_destination(db, "ten", "c", url="https://169.254.169.254/", secret_ref="", secret_value=SECRET,
                                policy=policy(allowed_networks=("169.254.169.254/32",)), allow_private_network=True)
    # enable re-runs the guard under the policy in force now
    destinations.disable_destination(db, "ten", "a")
    with pytest.raises(DestinationForbiddenError):
        destinations.enable_destination(db, "ten", "a", policy=policy(allow_insecure_http=True))
    local = destinations.DestinationPolicy.local()
    assert destinations.enable_destination(db, "ten", "a", policy=local).status == "active"


def test_secret_checks_on_save(db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def add(ref: str, **kw: Any) -> store.Destination:
        return destinations.add_destination(db, "ten", "d", url="https://h.example/", secret_ref=ref,
                                       policy=policy(**kw), replace=True)

    secret_file = tmp_path / "whsec.txt"
    secret_file.write_text(SECRET + "\n", encoding="utf-8")
    for ref in (f"file:{tmp_path / 'missing'}", f"file:{secret_file}", "file:/etc/shadow", "file:relative"):
        with pytest.raises(SecretRefError) as e1:  # legacy file refs: refused alike, nothing read
            add(ref)
        assert e1.value.reason == "secret_file_refused" and e1.value.code == "SECRET_FILE_REFUSED"
    with pytest.raises(SecretRefError) as e2:
        add("inline:" + SECRET)
    assert e2.value.reason == "secret_provider_forbidden" and SECRET not in str(e2.value.to_problem())
    monkeypatch.setenv("SK_DLV_SECRET", SECRET)
    with pytest.raises(SecretRefError):
        add("env:SK_DLV_SECRET")
    assert add("env:SK_DLV_SECRET", allow_env_secrets=True).secret_ref == "env:SK_DLV_SECRET"
    bad = tmp_path / "bad.txt"
    bad.write_text("not-a-whsec-secret\n", encoding="utf-8")
    with pytest.raises(ValidationError) as e3:
        destinations.add_destination(db, "ten", "d", url="https://h.example/", secret_ref="",
                                secret_value="not-a-whsec-secret", policy=policy(), replace=True)
    assert e3.value.code == "WEBHOOK_SECRET_INVALID"
    assert "not-a-whsec-secret" not in json.dumps(e3.value.to_problem())
    # legacy signing uses the raw string, so any non-empty secret is fine
    legacy = destinations.add_destination(db, "ten", "legacy", url="https://h.example/", secret_ref="",
                                     secret_value="not-a-whsec-secret", signing="settld_legacy", policy=policy())
    assert legacy.signing == "settld_legacy"
    inline = destinations.add_destination(db, "ten", "inl", url="https://h.example/", secret_ref="inline:" + SECRET,
                                     policy=policy(allow_inline_secrets=True))
    assert SECRET not in json.dumps(inline.to_json())
    for bad_id in ("", "a:b", "x" * 65, "-x", "a b"):
        with pytest.raises(ValidationError):
            destinations.add_destination(db, "ten", bad_id, url="https://h.example/", secret_ref="",
                                    secret_value="not-a-whsec-secret", signing="settld_legacy", policy=policy())


# --- deliveries and requeue ---------------------------------------------------------------------------------


def test_list_get_and_requeue(db: Database, secret_path: Path) -> None:
    arts = Artifacts()
    for dest_id in ("d1", "d2"):
        destinations.add_destination(db, "ten", dest_id, url="https://h.example/", secret_ref="", secret_value=SECRET,
                                policy=policy())
    for i in range(3):
        enqueue(db, arts, artifact(f"j{i}", 1))
    rows = destinations.list_deliveries(db, "ten")
    assert len(rows) == 6
    with db.transaction() as tx:
        claimed = store.claim(tx, worker="w", limit=10, lease=timedelta(seconds=60), now=T0)
        for d in claimed:
            if d.destination_id == "d2" or d.artifact_id == "cert_j0_evt_1":
                store.mark_failed(tx, d.id, "w", status=500, error="non_2xx", now=T0, retention=timedelta(days=1))
            else:
                store.mark_delivered(tx, d.id, "w", status=200, now=T0, retention=timedelta(days=1))
    failed = destinations.list_deliveries(db, "ten", state="failed")
    assert len(failed) == 4
    assert [d.id for d in destinations.list_deliveries(db, "ten", limit=2, after_id=rows[1].id)] == [
        rows[2].id, rows[3].id
    ]
    failed = destinations.list_deliveries(db, "ten", state="failed", destination_id="d1")
    assert failed[0].artifact_id == "cert_j0_evt_1"
    with pytest.raises(ValidationError):
        destinations.list_deliveries(db, "ten", state="lost")
    detail = destinations.get_delivery(db, "ten", failed[0].id)
    assert detail.delivery.state == "failed" and detail.delivery.to_json()["state"] == "failed"
    with pytest.raises(NotFoundError):
        destinations.get_delivery(db, "other", failed[0].id)
    one = next(d for d in failed if d.destination_id == "d1")
    assert destinations.requeue_delivery(db, "ten", one.id) == 1
    with pytest.raises(ConflictError):
        destinations.requeue_delivery(db, "ten", one.id)  # pending now
    with pytest.raises(NotFoundError):
        destinations.requeue_delivery(db, "other", one.id)
    assert destinations.requeue_destination(db, "ten", "d2") == 3
    assert destinations.requeue_destination(db, "ten", "d2") == 0
    with pytest.raises(NotFoundError):
        destinations.requeue_destination(db, "ten", "nope")
    pending = destinations.list_deliveries(db, "ten", state="pending")
    assert len(pending) == 4 and all(d.attempts == 0 for d in pending)
    assert {d.message_id for d in pending} <= {d.message_id for d in rows}


# --- CLI ----------------------------------------------------------------------------------------------------


def test_cli_destinations_deliveries_and_requeue(
    tmp_path: Path, secret_path: Path, sqlite_url: str
) -> None:
    from settlekit.store.db import opened

    with opened(sqlite_url):
        pass
    runner = CliRunner()

    def cli(*args: str) -> Any:
        return runner.invoke(app, ["deliveries", *args, "--db", sqlite_url, "--tenant", "ten"])

    r = cli("destinations", "add", "--id", "local", "--url", "http://127.0.0.1:9/",
            "--secret-file", str(secret_path))
    assert r.exit_code == 1 and "DESTINATION_URL_FORBIDDEN" in r.output
    r = cli("destinations", "add", "--id", "local", "--url", "http://127.0.0.1:9/", "--secret-file",
            str(secret_path), "--allow-loopback", "--allow-insecure-http", "--type", "WorkCertificate.v1")
    assert r.exit_code == 0, r.output
    assert SECRET not in r.output
    r = cli("destinations", "add", "--id", "gen", "--url", "http://127.0.0.1:9/", "--generate-secret",
            "--secret-dir", str(tmp_path / "sec"), "--allow-loopback", "--allow-insecure-http")
    assert r.exit_code == 0, r.output
    gen = tmp_path / "sec" / "ten.gen.whsec"
    assert stat.S_IMODE(os.stat(gen).st_mode) == 0o600
    generated = gen.read_text(encoding="utf-8").strip()
    assert generated.startswith("whsec_") and generated not in r.output
    r = cli("destinations", "add", "--id", "x", "--url", "https://h.example/")
    assert r.exit_code != 0  # no secret given
    r = cli("destinations", "list", "--json")
    listed = json.loads(r.stdout)
    assert [d["destination_id"] for d in listed] == ["gen", "local"]
    assert "whsec_" not in r.stdout
    assert cli("destinations", "disable", "--id", "gen").exit_code == 0
    assert cli("destinations", "enable", "--id", "gen").exit_code == 1  # SSRF guard runs again
    assert cli("destinations", "enable", "--id", "gen", "--allow-loopback", "--allow-insecure-http").exit_code == 0

    from settlekit.store.db import connect

    db = connect(sqlite_url)
    try:
        arts = Artifacts()
        enqueue(db, arts, artifact("j", 1))
        with db.transaction() as tx:
            for d in store.claim(tx, worker="w", limit=10, lease=timedelta(seconds=60), now=T0):
                store.mark_failed(tx, d.id, "w", status=500, error="non_2xx", now=T0, retention=timedelta(days=1))
        r = cli("list", "--state", "failed", "--json")
        rows = json.loads(r.stdout)
        assert len(rows) == 2 and {row["state"] for row in rows} == {"failed"}
        assert cli("requeue").exit_code != 0
        assert cli("requeue", "--destination-id", "gen").exit_code != 0  # --all required
        r = cli("requeue", "--delivery-id", str(rows[0]["id"]))
        assert r.exit_code == 0 and "requeued 1 delivery" in r.output
        r = cli("requeue", "--delivery-id", str(rows[0]["id"]))
        assert r.exit_code == 1 and "CONFLICT" in r.output
        r = cli("requeue", "--destination-id", rows[1]["destination_id"], "--all")
        assert r.exit_code == 0 and "requeued 1 delivery" in r.output
        assert len(json.loads(cli("list", "--state", "pending", "--json").stdout)) == 2
        assert cli("list").exit_code == 0
    finally:
        db.close()


# --- sink and loader ----------------------------------------------------------------------------------------


def test_sink_enqueues_per_matching_destination_and_loader_reads_back(
    db: Database, secret_path: Path
) -> None:
    destinations.add_destination(db, "ten", "all", url="https://h.example/", secret_ref="", secret_value=SECRET,
                            policy=policy())
    destinations.add_destination(db, "ten", "settle", url="https://h.example/", secret_ref="", secret_value=SECRET,
                            policy=policy(),
                            artifact_types=["SettlementStatement.v1"])
    destinations.add_destination(db, "ten", "off", url="https://h.example/", secret_ref="", secret_value=SECRET,
                            policy=policy())
    destinations.disable_destination(db, "ten", "off")
    woken: list[int] = []
    sink = WebhookDeliverySink(clock=lambda: T0, on_enqueued=lambda: woken.append(1))
    cert, settle = artifact("j", 1), artifact("j", 1, "SettlementStatement.v1")
    with db.transaction() as tx:
        for doc in (cert, settle):
            row = {
                "tenant_id": "ten",
                "artifact_id": doc["artifactId"],
                "job_id": "j",
                "artifact_type": doc["artifactType"],
                "artifact_hash": doc["artifactHash"],
                "artifact_json": json.dumps(doc),
            }
            tx.execute(  # the artifacts table of migration 0004
                "INSERT INTO artifacts (tenant_id, artifact_id, job_id, artifact_type, source_event_id,"
                " source_chain_hash, artifact_hash, job_version, artifact_json, generated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                ("ten", doc["artifactId"], "j", doc["artifactType"], "evt_1", "chain", doc["artifactHash"], 1,
                 row["artifact_json"], store.db_time(tx, T0)),
            )
            sink.enqueue(tx, "ten", row)
        assert sink.enqueue(tx, "ten", row) == 0  # idempotent
    got = sorted((d.destination_id, d.artifact_type) for d in destinations.list_deliveries(db, "ten"))
    assert got == [("all", "SettlementStatement.v1"), ("all", "WorkCertificate.v1"),
                   ("settle", "SettlementStatement.v1")]
    assert woken == [1, 1]
    with db.read() as tx:
        assert artifact_loader(tx, "ten", settle["artifactId"]) == settle
        assert artifact_loader(tx, "other", settle["artifactId"]) is None
    with db.transaction() as tx, pytest.raises(ArtifactRowError):
        sink.enqueue(tx, "ten", {**row, "artifact_hash": "sha256:forged"})
    with db.transaction() as tx:  # the outbox protocol passes the artifact document itself
        assert sink.enqueue(tx, "ten", artifact("k", 1)) == 1


def test_sink_satisfies_the_artifacts_outbox_protocol() -> None:
    from settlekit.projections.sinks import DeliverySink

    assert isinstance(WebhookDeliverySink(), DeliverySink)


def test_sink_quota(db: Database, secret_path: Path) -> None:
    destinations.add_destination(db, "ten", "a", url="https://h.example/", secret_ref="", secret_value=SECRET,
                            policy=policy())
    sink = WebhookDeliverySink(max_pending=1)
    with db.transaction() as tx:
        sink.enqueue(tx, "ten", artifact("a", 1))
    with db.transaction() as tx, pytest.raises(QuotaExceededError):
        sink.enqueue(tx, "ten", artifact("b", 1))


# --- metrics ------------------------------------------------------------------------------------------------


def test_metrics(db: Database, secret_path: Path) -> None:
    arts, clock = Artifacts(), Clock()
    registry = CollectorRegistry()
    with FaultyReceiver(secrets=[SECRET], tolerance_seconds=10**10) as rx:
        destinations.add_destination(db, "ten", "d1", url=rx.url, secret_ref="", secret_value=SECRET,
                                policy=destinations.DestinationPolicy.local())
        for i in range(3):
            enqueue(db, arts, artifact(f"j{i}", 1))
        rx.inject(500)
        worker = DeliveryWorker(
            db,
            artifact_loader=arts,
            config=WorkerConfig(
                allow_insecure_http=True,
                allow_loopback=True,
                sender=SenderConfig(timeout=2.0),
                retry=RetryPolicy(max_attempts=1),
                per_destination_metrics=True,
            ),
            clock=clock,
            registry=registry,
        )
        result = run(one_pass(worker))
    assert (result.delivered, result.failed) == (2, 1)

    def sample(name: str, labels: dict[str, str] | None = None) -> float | None:
        return registry.get_sample_value(name, labels or {})

    assert sample("settlekit_delivery_attempts_total", {"destination_id": "d1", "outcome": "delivered"}) == 2
    assert sample("settlekit_delivery_attempts_total", {"destination_id": "d1", "outcome": "failed"}) == 1
    assert sample("settlekit_delivery_failures_total", {"reason": "non_2xx"}) == 1
    assert sample("settlekit_delivery_dlq_total") == 1
    assert sample("settlekit_delivery_duration_seconds_count") == 3
    register_queue_collector(db, registry, clock=lambda: T0 + timedelta(seconds=30))
    assert sample("settlekit_deliveries_pending", {"state": "delivered"}) == 2
    assert sample("settlekit_deliveries_pending", {"state": "pending"}) == 0
    assert sample("settlekit_delivery_dlq_size") == 1
    assert sample("settlekit_delivery_oldest_pending_seconds") == 0
    enqueue(db, arts, artifact("late", 1))
    assert sample("settlekit_deliveries_pending", {"state": "pending"}) == 1
    assert sample("settlekit_delivery_oldest_pending_seconds") == 30


def test_webhooks_module_reexports() -> None:
    import settlekit.webhooks as wh
    from settlekit.delivery import receiver

    assert wh.verify is receiver.verify and wh.verify_legacy is receiver.verify_legacy
    assert wh.verify_webhook is receiver.verify_webhook
    assert issubclass(wh.WebhookVerificationError, Exception)
