"""CLI: migrate, verify (vectors' format, both key file forms), export."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from conftest import load_vector
from settlekit.append import Appender
from settlekit.cli import app
from settlekit.store.db import connect

runner = CliRunner()


def _write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_verify_vector_with_both_key_forms(tmp_path: Path) -> None:
    vector = load_vector("claim_adjust_paid.json")
    stream = _write(tmp_path / "s.json", vector["events"])
    as_list = _write(tmp_path / "k1.json", vector["signers"])
    as_map = _write(tmp_path / "k2.json", {s["keyId"]: s["publicKeyPem"] for s in vector["signers"]})
    for keys in (as_list, as_map):
        result = runner.invoke(app, ["verify", str(stream), "--keys", str(keys)])
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["ok"] is True


def test_verify_names_first_bad_index(tmp_path: Path) -> None:
    vector = load_vector("settle_completed.json")
    events = vector["events"]
    events[7]["payload"] = {"tampered": True}
    stream = _write(tmp_path / "s.json", events)
    keys = _write(tmp_path / "k.json", vector["signers"])
    result = runner.invoke(app, ["verify", str(stream), "--keys", str(keys)])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report == {"ok": False, "index": 7, "code": "PAYLOAD_HASH_MISMATCH", "reason": report["reason"]}
    result = runner.invoke(app, ["verify", str(_write(tmp_path / "ok.json", load_vector("settle_completed.json")
                                                      ["events"]))])
    assert result.exit_code == 1
    assert json.loads(result.stdout)["code"] == "SIGNER_UNKNOWN"


def test_migrate_and_export_round_trip(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    result = runner.invoke(app, ["migrate", "--db", url])
    assert result.exit_code == 0, result.output
    vector = load_vector("settle_aborted.json")
    db = connect(url)
    store = Appender(db)
    for signer in vector["signers"]:
        store.signer_keys.register("tenant_default", signer["publicKeyPem"], signer["role"])
    store.append("tenant_default", vector["events"][0]["streamId"], vector["events"])
    db.close()
    out = tmp_path / "export.json"
    result = runner.invoke(app, ["export", "--db", url, "--stream", vector["events"][0]["streamId"], "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text()) == vector["events"]
    keys = _write(tmp_path / "k.json", vector["signers"])
    assert runner.invoke(app, ["verify", str(out), "--keys", str(keys)]).exit_code == 0
    missing = runner.invoke(app, ["export", "--db", url, "--stream", "nope"])
    assert missing.exit_code == 1
