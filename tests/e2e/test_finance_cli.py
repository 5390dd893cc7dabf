"""`settlekit finance close|show|export|gl-mapping`, `settlekit export --proof|--consistency` and the offline
`settlekit verify` of a close, its journal and the log proofs."""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from settlekit.append import job_appender
from settlekit.cli import app
from settlekit.simulate import SCENARIO_ORDER, Fleet, job_stream
from settlekit.store.db import opened

T = "tenant_default"


@pytest.fixture
def closed(tmp_path: Path) -> tuple[str, Path]:
    url = f"sqlite:///{tmp_path / 'fin.db'}"
    with opened(url) as db:
        store = job_appender(db, clock=lambda: datetime(2026, 1, 6, tzinfo=UTC), server_rules=False)
        fleet = Fleet.create()
        for reg in fleet.registrations():
            store.signer_keys.register(T, reg["publicKeyPem"], reg["purpose"], entity_id=reg.get("entityId"))
        for i, scenario in enumerate(SCENARIO_ORDER):
            events = job_stream(scenario, f"job_{i:04d}", fleet, i)
            store.append(T, events[0]["streamId"], events)
    key = tmp_path / "server.pem"
    for month in ("2026-01", "2026-02"):
        result = CliRunner().invoke(app, ["finance", "close", "--month", month, "--db", url,
                                          "--server-key-file", str(key), "--json"])
        assert result.exit_code == 0, result.output
    return url, tmp_path


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout


def test_close_show_export_and_verify_offline(closed: tuple[str, Path]) -> None:
    url, tmp = closed
    code, out = _run("finance", "show", "--month", "2026-01", "--db", url)
    assert code == 0
    (tmp / "close.json").write_text(out, encoding="utf-8")
    code, out = _run("finance", "export", "--month", "2026-01", "--out", str(tmp / "j.csv"), "--db", url)
    assert code == 0, out
    code, out = _run("verify", "--artifact", str(tmp / "close.json"), "--journal", str(tmp / "j.csv"))
    assert code == 0 and json.loads(out)["journalValid"], out
    _run("export", "--stream", "job_0001", "--db", url, "--out", str(tmp / "stream.json"))
    code, out = _run("verify", "--artifact", str(tmp / "close.json"))
    assert code == 0 and json.loads(out)["signatureValid"], out
    # a stream beside a close would not be checked: the combination is refused (a usage error)
    code, out = _run("verify", str(tmp / "stream.json"), "--artifact", str(tmp / "close.json"))
    assert code == 2, out
    if shutil.which("sha256sum"):
        digest = subprocess.run(["sha256sum", str(tmp / "j.csv")], capture_output=True, text=True, check=True)
        assert digest.stdout.split()[0] == json.loads((tmp / "close.json").read_text())["journal"]["sha256"]
    (tmp / "j.csv").write_bytes((tmp / "j.csv").read_bytes() + b"\n")
    code, out = _run("verify", "--artifact", str(tmp / "close.json"), "--journal", str(tmp / "j.csv"))
    assert code == 1 and not json.loads(out)["journalValid"]


def test_inclusion_and_consistency_proofs_export_and_verify(closed: tuple[str, Path]) -> None:
    url, tmp = closed
    code, out = _run("export", "--proof", "job_0003", "--month", "2026-01", "--db", url)
    assert code == 0
    (tmp / "proof.json").write_text(out, encoding="utf-8")
    code, _ = _run("export", "--stream", "job_0003", "--db", url, "--out", str(tmp / "stream.json"))
    assert code == 0
    code, out = _run("verify", str(tmp / "stream.json"), "--proof", str(tmp / "proof.json"))
    assert code == 0 and json.loads(out)["streamMatches"], out
    (tmp / "other.json").write_text(json.dumps({"key_other": Fleet.create().server.public_key_pem}), "utf-8")
    code, out = _run("verify", "--proof", str(tmp / "proof.json"), "--keys", str(tmp / "other.json"))
    assert code == 1 and json.loads(out)["close"]["error"]["code"] == "FINANCE_SIGNER_UNKNOWN"
    proof = json.loads((tmp / "proof.json").read_text())
    proof["auditPath"][0] = "00" * 32
    (tmp / "bad.json").write_text(json.dumps(proof), encoding="utf-8")
    assert _run("verify", "--proof", str(tmp / "bad.json"))[0] == 1
    code, out = _run("export", "--consistency", "2026-01", "--month", "2026-02", "--db", url)
    assert code == 0
    (tmp / "cons.json").write_text(out, encoding="utf-8")
    code, out = _run("verify", "--proof", str(tmp / "cons.json"))
    assert code == 0 and json.loads(out)["consistent"]
    # a consistency proof's tenantId is checked against its signed closes, as an inclusion proof's is
    for tenant in ("tenant_other", None):
        forged = {**json.loads((tmp / "cons.json").read_text()), "tenantId": tenant}
        (tmp / "forged.json").write_text(json.dumps(forged), encoding="utf-8")
        code, out = _run("verify", "--proof", str(tmp / "forged.json"))
        assert code == 1 and json.loads(out)["error"]["message"] == "the proof's tenantId is not the signed closes'"


def test_gl_mapping_and_batch(closed: tuple[str, Path]) -> None:
    url, tmp = closed
    from settlekit.ledger.accounts import ACCOUNT_IDS

    mapping = {"schemaVersion": "GlMapping.v1", "accounts": {a: {"glAccount": str(1000 + i)}
                                                             for i, a in enumerate(ACCOUNT_IDS[:3])}}
    (tmp / "map.json").write_text(json.dumps(mapping), encoding="utf-8")
    assert _run("finance", "gl-mapping", "set", str(tmp / "map.json"), "--db", url)[0] == 0
    result = CliRunner().invoke(app, ["finance", "export", "--month", "2026-01", "--format", "gl-batch", "--db", url])
    assert result.exit_code == 1 and "FINANCE_GL_ACCOUNT_UNMAPPED" in result.output
    mapping["accounts"] = {a: {"glAccount": str(1000 + i)} for i, a in enumerate(ACCOUNT_IDS)}
    (tmp / "map.json").write_text(json.dumps(mapping), encoding="utf-8")
    assert _run("finance", "gl-mapping", "set", str(tmp / "map.json"), "--db", url)[0] == 0
    code, out = _run("finance", "export", "--month", "2026-01", "--format", "gl-batch", "--db", url)
    assert code == 0
    batch = json.loads(out)
    assert batch["batchType"] == "GlBatch.v1" and batch["lineCount"] == len(batch["lines"]) > 0


def test_close_needs_the_server_key(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["finance", "close", "--month", "2026-01",
                                      "--db", f"sqlite:///{tmp_path / 'x.db'}"],
                                env={"SETTLEKIT_SERVER_KEY_FILE": ""})
    assert result.exit_code == 2 and "SETTINGS_INVALID" in result.output


def test_closing_every_tenant_goes_on_past_one_that_is_refused(closed: tuple[str, Path]) -> None:
    url, tmp = closed
    with opened(url) as db:
        store = job_appender(db, clock=lambda: datetime(2026, 1, 6, tzinfo=UTC), server_rules=False)
        fleet = Fleet.create()
        for reg in fleet.registrations():
            store.signer_keys.register("tenant_other", reg["publicKeyPem"], reg["purpose"],
                                       entity_id=reg.get("entityId"))
        events = job_stream(SCENARIO_ORDER[0], "job_other", fleet, 0)
        store.append("tenant_other", "job_other", events)
    result = CliRunner().invoke(app, ["finance", "close", "--month", "2025-12", "--db", url, "--server-key-file",
                                      str(tmp / "server.pem"), "--json"])
    assert result.exit_code == 1
    assert [r["tenantId"] for r in json.loads(result.stdout.splitlines()[0])] == ["tenant_other"]
    assert "FINANCE_PERIOD_ORDER" in result.output
