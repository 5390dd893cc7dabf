"""Crash-loop guard (a delivery whose send kills its worker on every claim is dead-lettered as crash_loop after
max_claims claims, the others keep flowing), legacy `file:` secret refs (never read; `deliveries secrets
migrate` imports the ones inside the secrets directory in their own tenant's area, refuses the rest) and the legacy
`x-proxy-delivery-id` header (the id the tenant sees, not the row id)."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from test_delivery_faults import RealClock, fast_worker
from test_delivery_worker import SECRET, Artifacts, add_destination, artifact, deliveries, make_worker, run

from settlekit.cursors import DELIVERY, Cursors
from settlekit.delivery.enqueue import enqueue_artifact
from settlekit.delivery.legacy_secrets import migrate_file_refs
from settlekit.delivery.receiver import ReceiverServer
from settlekit.delivery.secrets import secret_id_of
from settlekit.delivery.signing import generate_secret
from settlekit.store import cursor_secret
from settlekit.store import deliveries as store
from settlekit.store.db import Database
from support.failpoints import SimulatedCrash

MAX_CLAIMS = 3


def test_send_that_crashes_every_claim_is_dead_lettered_and_others_flow(db: Database) -> None:
    arts, clock = Artifacts(), RealClock()
    with ReceiverServer(secrets=[SECRET], tolerance_seconds=10**10) as rx:
        dest = add_destination(db, rx.url, "inline:" + SECRET)
        del dest
        with db.transaction() as tx:
            for i in range(8):
                enqueue_artifact(tx, "ten", arts.add(artifact(f"j{i}", 1)), now=clock())
        poison = deliveries(db)[0]
        crashes: list[int] = []

        def kill_at_send_of_poison(name: str, worker_id: str) -> None:
            if name != "sending":
                return
            with db.read() as tx:  # the rows this worker holds, about to be sent
                held = tx.fetchall("SELECT id FROM deliveries WHERE lease_owner = ?", (worker_id,))
            if poison.id in {int(r[0]) for r in held}:
                crashes.append(poison.id)
                raise SimulatedCrash("send of the poison delivery")

        from settlekit.delivery.secrets import SecretResolver

        async def life(wid: str) -> bool:
            async with fast_worker(db, arts, clock, wid, config={"batch_size": 5, "max_claims": MAX_CLAIMS},
                                   failpoint=lambda name: kill_at_send_of_poison(name, wid),
                                   secret_resolver=SecretResolver(allow_inline=True)) as worker:
                return await worker.drain(timeout=20)

        for k in range(MAX_CLAIMS + 10):
            try:
                if run(life(f"life{k}")):
                    break
            except SimulatedCrash:
                clock.advance(3)  # the killed worker's leases expire
        rows = {d.id: d for d in deliveries(db)}
        assert len(crashes) == MAX_CLAIMS  # it crashed a worker on each of its claims, then was never sent
        dead = rows.pop(poison.id)
        assert (dead.state, dead.last_error, dead.claims) == ("failed", "crash_loop", 0)
        assert {d.state for d in rows.values()} == {"delivered"}  # the others kept flowing
        assert set(rx.received) == {d.message_id for d in rows.values()}
        assert poison.message_id not in rx.received
        with db.read() as tx:
            assert [(a, e) for a, _, e in store.list_attempts(tx, poison.id)] == [
                (1, f"claimed {MAX_CLAIMS} times without a recorded outcome (worker crashes)")]


def test_graceful_release_takes_the_claim_back(db: Database) -> None:
    add_destination(db, "https://a.example/", "inline:" + SECRET)
    arts = Artifacts()
    now = datetime.now(UTC)
    with db.transaction() as tx:
        enqueue_artifact(tx, "ten", arts.add(artifact("a", 1)), now=now)
    for _ in range(MAX_CLAIMS + 2):
        with db.transaction() as tx:
            (d,) = store.claim(tx, worker="w", limit=5, lease=timedelta(seconds=5), now=now)
            assert d.claims == 1
            assert store.release(tx, [d.id], "w", now=now) == 1
    assert deliveries(db)[0].claims == 0


# --- legacy file: refs --------------------------------------------------------------------------------------


def _legacy(db: Database, tenant: str, dest_id: str, ref: str, **kw: Any) -> None:
    with db.transaction() as tx:
        store.put_destination(tx, store.Destination(tenant_id=tenant, destination_id=dest_id,
                                                    url="https://h.example/", secret_ref=ref, **kw),
                              now=datetime.now(UTC))


def test_worker_refuses_file_refs_and_flags_the_destination(db: Database, tmp_path: Path) -> None:
    f = tmp_path / "whsec.txt"
    f.write_text(SECRET + "\n", encoding="utf-8")
    arts, clock = Artifacts(), RealClock()
    for dest_id, ref in (("exists", f"file:{f}"), ("missing", f"file:{tmp_path / 'nope'}"),
                         ("system", "file:/etc/shadow")):
        _legacy(db, "ten", dest_id, ref)
    with db.transaction() as tx:
        for i in range(2):
            enqueue_artifact(tx, "ten", arts.add(artifact(f"j{i}", 1)), now=clock())
    run(fast_worker(db, arts, clock, "w").drain(timeout=10))
    rows = deliveries(db)
    by_dest: dict[str, list[tuple[str, str | None]]] = {}
    for d in rows:
        by_dest.setdefault(d.destination_id, []).append((d.state, d.last_error))
    # the same answer whatever the file: the first fails, the destination is disabled, the rest wait
    for dest_id in ("exists", "missing", "system"):
        assert sorted(by_dest[dest_id]) == [("failed", "secret_file_refused"), ("pending", "secret_file_refused")]
        with db.read() as tx:
            dest = store.get_destination(tx, "ten", dest_id)
        assert dest is not None and (dest.status, dest.disabled_reason) == ("disabled", "secret_file_refused")


def test_migrate_imports_own_tenant_files_and_refuses_the_rest(db: Database, tmp_path: Path) -> None:
    root = tmp_path / "secrets"
    (root / "ten").mkdir(parents=True)
    (root / "other").mkdir()
    outside = tmp_path / "outside.whsec"
    values = {name: generate_secret() for name in ("api", "cli", "other", "outside", "prev")}
    (root / "ten" / "api.0a1b.secret").write_text(values["api"] + "\n", encoding="utf-8")
    (root / "ten.cli.whsec").write_text(values["cli"] + "\n", encoding="utf-8")
    (root / "other" / "x.secret").write_text(values["other"] + "\n", encoding="utf-8")
    (root / "ten" / "prev.secret").write_text(values["prev"] + "\n", encoding="utf-8")
    outside.write_text(values["outside"] + "\n", encoding="utf-8")
    os.symlink(outside, root / "ten" / "link.secret")  # inside by name, outside once resolved
    os.symlink(root / "other", root / "ten" / "otherdir")  # into another tenant's area
    later = datetime.now(UTC) + timedelta(days=1)
    _legacy(db, "ten", "api", f"file:{root / 'ten' / 'api.0a1b.secret'}", previous_secret_ref=
            f"file:{root / 'ten' / 'prev.secret'}", previous_secret_expires_at=later)
    _legacy(db, "ten", "cli", f"file:{root / 'ten.cli.whsec'}")
    _legacy(db, "other", "x", f"file:{root / 'other' / 'x.secret'}")
    refused = {
        "foreign": f"file:{root / 'other' / 'x.secret'}",  # another tenant's file
        "outside": f"file:{outside}",
        "dotdot": f"file:{root / 'ten' / '..' / 'other' / 'x.secret'}",
        "symlink": f"file:{root / 'ten' / 'link.secret'}",
        "dirlink": f"file:{root / 'ten' / 'otherdir' / 'x.secret'}",
        "relative": "file:ten/api.0a1b.secret",
        "missing": f"file:{root / 'ten' / 'missing.secret'}",
        "flatother": f"file:{root / 'ten.cli.whsec'}",  # the flat name of another destination
        "system": "file:/etc/passwd",
    }
    for dest_id, ref in refused.items():
        _legacy(db, "ten", dest_id, ref)
    with db.transaction() as tx:  # a delivery failed by the refusal, to requeue once migrated
        enqueue_artifact(tx, "ten", artifact("j", 1), now=datetime.now(UTC))
        tx.execute("UPDATE deliveries SET state = 'failed', last_error = 'secret_file_refused'"
                   " WHERE destination_id = 'cli'")
        tx.execute("DELETE FROM deliveries WHERE destination_id <> 'cli'")
        store.set_destination_status(tx, "ten", "cli", status="disabled", reason="secret_file_refused",
                                     now=datetime.now(UTC))
    report = migrate_file_refs(db, root, now=datetime.now(UTC))
    migrated = {(o.tenant_id, o.destination_id, o.field) for o in report.migrated}
    assert migrated == {("ten", "api", "secret_ref"), ("ten", "api", "previous_secret_ref"),
                        ("ten", "cli", "secret_ref"), ("other", "x", "secret_ref")}
    assert {o.destination_id: o.reason for o in report.refused} == {
        "foreign": "file is not in this tenant's area of the secrets directory",
        "outside": "file is outside the secrets directory",
        "dotdot": "path has a '..' component",
        "symlink": "file is outside the secrets directory",
        "dirlink": "file is not in this tenant's area of the secrets directory",
        "relative": "path is not absolute",
        "missing": "file not found",
        "flatother": "file is not in this tenant's area of the secrets directory",
        "system": "file is outside the secrets directory",
    }
    assert report.enabled == [("ten", "cli")] and report.requeued == 1
    with db.read() as tx:
        api = store.get_destination(tx, "ten", "api")
        assert api is not None
        sid, prev = secret_id_of(api.secret_ref), secret_id_of(api.previous_secret_ref)
        assert sid and prev
        assert tx.scalar("SELECT secret FROM webhook_secrets WHERE tenant_id = 'ten' AND secret_id = ?",
                         (sid,)) == values["api"]
        assert tx.scalar("SELECT secret FROM webhook_secrets WHERE tenant_id = 'ten' AND secret_id = ?",
                         (prev,)) == values["prev"]
        other = store.get_destination(tx, "other", "x")
        assert other is not None
        assert tx.scalar("SELECT tenant_id FROM webhook_secrets WHERE secret_id = ?",
                         (secret_id_of(other.secret_ref),)) == "other"  # its own tenant's table rows
        cli = store.get_destination(tx, "ten", "cli")
        assert cli is not None and cli.status == "active" and secret_id_of(cli.secret_ref)
        for dest_id, ref in refused.items():
            kept = store.get_destination(tx, "ten", dest_id)
            assert kept is not None and kept.secret_ref == ref  # refused: left as it was
        assert [d.state for d in store.list_deliveries(tx, "ten", destination_id="cli")] == ["pending"]
        stored = [r[0] for r in tx.fetchall("SELECT secret FROM webhook_secrets")]
    assert values["outside"] not in stored
    again = migrate_file_refs(db, root, now=datetime.now(UTC))
    assert again.migrated == [] and len(again.refused) == len(refused)


def test_migrate_without_a_directory_refuses_everything(db: Database, tmp_path: Path) -> None:
    f = tmp_path / "s.whsec"
    f.write_text(generate_secret() + "\n", encoding="utf-8")
    _legacy(db, "ten", "d", f"file:{f}")
    report = migrate_file_refs(db, None, now=datetime.now(UTC))
    assert [(o.destination_id, o.reason) for o in report.refused] == [("d", "no secrets directory given")]


def test_migrate_cli(sqlite_url: str, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from settlekit.cli import app
    from settlekit.store.db import connect

    root = tmp_path / "secrets"
    (root / "ten").mkdir(parents=True)
    (root / "ten" / "d.secret").write_text(generate_secret() + "\n", encoding="utf-8")
    database = connect(sqlite_url)
    database.migrate()
    _legacy(database, "ten", "d", f"file:{root / 'ten' / 'd.secret'}")
    _legacy(database, "ten", "e", "file:/etc/passwd")
    database.close()
    out = CliRunner().invoke(app, ["deliveries", "secrets", "migrate", "--db", sqlite_url, "--secrets-dir",
                                   str(root)])
    assert out.exit_code == 1, out.output  # something was refused
    assert "migrated ten/d secret_ref" in out.output and "refused  ten/e secret_ref: /etc/passwd" in out.output
    assert "1 migrated, 1 refused" in out.output


@pytest.mark.parametrize("bad", [0, -1])
def test_max_claims_must_be_positive(db: Database, bad: int) -> None:
    from settlekit.errors import ConfigurationError

    with pytest.raises(ConfigurationError):
        fast_worker(db, Artifacts(), RealClock(), "w", config={"max_claims": bad})


def test_the_legacy_delivery_id_header_is_the_id_the_tenant_sees(db: Database) -> None:
    """The row id counts every tenant's deliveries: the header carries the tenant's token, as the API shows it."""
    arts, clock = Artifacts(), RealClock()
    dest = add_destination(db, "http://127.0.0.1:9/legacy", "inline:" + SECRET, signing="settld_legacy")
    doc = arts.add(artifact("j1", 1))
    with db.transaction() as tx:
        enqueue_artifact(tx, "ten", doc, now=clock())
    row = deliveries(db)[0]
    request = make_worker(db, arts, clock)._prepare(row, dest, doc, clock(), [SECRET])
    shown = Cursors(cursor_secret.read(db)).encode(DELIVERY, "ten", row.id)
    assert request.headers["x-proxy-delivery-id"] == shown != str(row.id)
