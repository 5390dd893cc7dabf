"""CLI: migrate, verify (vectors' format, both key file forms), export."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from conftest import load_vector
from settlekit.append import Appender
from settlekit.cli import app
from settlekit.events.canonical import canonical_json, parse_json, storable_text
from settlekit.events.envelope import Signer, finalize
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


def _nested(depth: int) -> Any:
    value: Any = "bottom"
    for level in range(depth):
        value = [value] if level % 2 else {"d": value, "__proto__": level}
    return value


def test_export_writes_a_payload_nested_deeper_than_pythons_encoder_goes(tmp_path: Path) -> None:
    """A stream whose last event holds a payload 1,500 levels deep (as a settld stream may, and the offline tools
    read) is exported, one event a line in canonical JSON with its own "__proto__" keys, and verifies."""
    url = f"sqlite:///{tmp_path / 'x.db'}"
    assert runner.invoke(app, ["migrate", "--db", url]).exit_code == 0
    vector = load_vector("settle_aborted.json")
    db = connect(url)
    store = Appender(db)
    for signer in vector["signers"]:
        store.signer_keys.register("tenant_default", signer["publicKeyPem"], signer["role"])
    stream_id = vector["events"][0]["streamId"]
    store.append("tenant_default", stream_id, vector["events"])
    last = vector["events"][-1]
    server = next(s for s in vector["signers"] if s["keyId"] == last["signerKeyId"])
    deep = finalize({**{k: last[k] for k in ("v", "id", "at", "streamId", "type", "actor")},
                     "payload": {**last["payload"], "deep": _nested(1500)}}, last["prevChainHash"],
                    Signer.from_pem(server["privateKeyPem"], server["publicKeyPem"]))
    with db.transaction() as tx:  # the live path takes no such payload (256 levels at most): the row as stored
        tx.execute("UPDATE events SET event_json = ?, payload_hash = ?, chain_hash = ? WHERE tenant_id = ?"
                   " AND event_id = ?", (storable_text(canonical_json(deep, keep_proto=True)), deep["payloadHash"],
                                         deep["chainHash"], "tenant_default", last["id"]))
        tx.execute("UPDATE streams SET head_chain_hash = ? WHERE tenant_id = ? AND stream_id = ?",
                   (deep["chainHash"], "tenant_default", stream_id))
    db.close()
    events = [*vector["events"][:-1], deep]
    out = tmp_path / "export.json"
    result = runner.invoke(app, ["export", "--db", url, "--stream", stream_id, "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text(encoding="utf-8")
    assert text == "[\n" + ",\n".join(canonical_json(e, keep_proto=True) for e in events) + "\n]\n"
    assert canonical_json(parse_json(text), keep_proto=True) == canonical_json(events, keep_proto=True)
    keys = _write(tmp_path / "k.json", vector["signers"])
    verified = runner.invoke(app, ["verify", str(out), "--keys", str(keys)])
    assert verified.exit_code == 0, verified.output
    printed = runner.invoke(app, ["export", "--db", url, "--stream", stream_id])
    assert printed.exit_code == 0 and printed.stdout == text
