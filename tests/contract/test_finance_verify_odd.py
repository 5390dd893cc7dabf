"""Offline `settlekit verify` of closes and log proofs given odd or tampered inputs. Found by a reviewer."""
from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from test_finance_close import _close, _extend, _post, _tenant
from typer.testing import CliRunner

from settlekit.application import finance as FIN
from settlekit.cli import app
from settlekit.ledger.close import verify_inclusion_proof
from settlekit.store.db import Database, connect
from settlekit.store.streams import Streams


def _run(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


@pytest.fixture
def files(db: Database, tmp_path: Path) -> dict[str, Any]:
    tenant = _tenant()
    _extend(db, tenant, "job_a", datetime(2026, 1, 10, tzinfo=UTC), 2)
    _extend(db, tenant, "job_b", datetime(2026, 1, 11, tzinfo=UTC), 1)
    jan = _close(db, tenant, "2026-01")
    proof = FIN.inclusion_proof(db, tenant, "2026-01", "job_a")
    stream = Streams(db).read_stream(tenant, "job_a")
    return {"tenant": tenant, "jan": jan, "proof": proof, "stream": stream, "dir": tmp_path}


def _write(files: dict[str, Any], name: str, value: Any) -> str:
    path = files["dir"] / name
    path.write_text(json.dumps(value), encoding="utf-8")
    return str(path)


def test_verify_proof_with_a_stream_lacking_an_envelope_field_is_a_report(files: dict[str, Any]) -> None:
    """An odd stream file next to an inclusion proof: its first event keeps streamId and prevChainHash but has no
    `actor`. `verify` must answer streamMatches false (exit 1), not raise."""
    events = [dict(e) for e in files["stream"]]
    del events[0]["actor"]
    result = _run("verify", _write(files, "s.json", events), "--proof", _write(files, "p.json", files["proof"]))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 1 and json.loads(result.stdout)["streamMatches"] is False


def test_verify_stream_with_a_close_artifact_does_not_pass_a_tampered_stream(files: dict[str, Any]) -> None:
    """`settlekit verify STREAM.json --keys K --artifact close.json`: the stream file is tampered (an event's
    payload changed, its hashes left as they were). `verify STREAM.json --keys K` exits 1 naming
    PAYLOAD_HASH_MISMATCH; with a MonthClose.v1 artifact too, the stream was silently ignored (exit 0, ok: true).
    The combination is now refused (exit 2): a close is checked with the server's keys, a stream in its own call."""
    from test_finance_close import SIGNER

    keys = _write(files, "keys.json", {SIGNER.key_id: SIGNER.public_key_pem})
    good = _write(files, "good.json", files["stream"])
    assert _run("verify", good, "--keys", keys).exit_code == 0
    events = [dict(e) for e in files["stream"]]
    events[1]["payload"] = {"note": "tampered"}
    stream = _write(files, "s.json", events)
    alone = _run("verify", stream, "--keys", keys)
    assert alone.exit_code == 1 and json.loads(alone.stdout)["code"] == "PAYLOAD_HASH_MISMATCH"
    result = _run("verify", stream, "--keys", keys, "--artifact", _write(files, "close.json", files["jan"]))
    assert result.exit_code == 2 and "ok" not in result.stdout, result.stdout


def test_an_inclusion_proof_relabelled_to_another_tenant_and_month_does_not_verify(files: dict[str, Any]) -> None:
    """The proof's own tenantId, month and treeSize are not compared with the signed close it embeds: a proof
    edited to claim another tenant, another month and another tree size still verifies ok."""
    proof = json.loads(json.dumps(files["proof"]))
    assert verify_inclusion_proof(proof)["ok"]
    proof.update({"tenantId": "tenant_someone_else", "month": "2031-07", "treeSize": 99})
    assert not verify_inclusion_proof(proof)["ok"]


@pytest.mark.parametrize("position", [str(2**63), str(2**64 + 5)])
def test_ledger_balances_position_beyond_int64_is_a_usage_error_not_a_traceback(db_url: str, position: str) -> None:
    """The API bounds `position` to 0..2**63-1 (a 400 beyond); the CLI's `--position` had only min=0, and SQLite
    raised OverflowError (a traceback)."""
    database = connect(db_url)
    database.migrate()
    tenant = _tenant()
    _post(database, tenant, "job_a", "e1", "2026-01-03T00:00:00.000Z", 100)
    database.close()
    result = CliRunner().invoke(app, ["ledger", "balances", "--db", db_url, "--tenant", tenant,
                                      "--position", position])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (0, 2), result.output
