"""Opt-in: settld's own clients against a live `settlekit serve` (api.settld_compat). Under node, settld's API SDK
and executor SDK, imported from a settld checkout and pointed at the server by their base URL alone, create, book,
complete and settle jobs; the robot's events are signed by the executor SDK and sent through its disk spool (a lost
answer replayed by its idempotency key, a stale head rebased after settld's 409); then every stream verifies with
`settlekit verify`. Script: tests/reference/settld_clients.mjs. Skipped unless SETTLEKIT_REFERENCE_DIR names a
settld checkout and `node` is on the PATH."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from settlekit.api.auth import create_api_key
from settlekit.runtime import load_server_signer
from settlekit.store.db import connect
from support.multiprocess import free_port

REFERENCE_DIR = os.environ.get("SETTLEKIT_REFERENCE_DIR")
SCRIPT = Path(__file__).resolve().parent.parent / "reference" / "settld_clients.mjs"
TENANT = "tenant_default"  # the executor SDK's default tenant

pytestmark = pytest.mark.skipif(
    not REFERENCE_DIR or shutil.which("node") is None,
    reason="set SETTLEKIT_REFERENCE_DIR to a settld 0.1.0 checkout (and have node) to run settld's clients",
)


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "settlekit.cli", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})


@pytest.fixture
def serving(db_url: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """`settlekit serve` on loopback with settld's routes at the origin too, and an API key of settld's default
    tenant; stopped at the end."""
    db = connect(db_url)
    try:
        db.migrate()
        _, key = create_api_key(db, TENANT, ["jobs:read", "jobs:write", "finance:write", "admin"])
    finally:
        db.close()
    key_file = tmp_path / "server.pem"
    server = load_server_signer(str(key_file))
    port = free_port()
    log = tmp_path / "serve.log"
    env = {**os.environ, "SETTLEKIT_DB": db_url, "SETTLEKIT_SERVER_KEY_FILE": str(key_file)}
    proc = subprocess.Popen([sys.executable, "-m", "settlekit.cli", "serve", "--host", "127.0.0.1", "--port",
                             str(port), "--settld-compat-at-root"], env=env, stdout=log.open("wb"),
                            stderr=subprocess.STDOUT)
    origin = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                if httpx.get(f"{origin}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"serve did not answer: {log.read_text()[-3000:]}"
            time.sleep(0.05)
        yield {"origin": origin, "key": key, "server": {server.key_id: server.public_key_pem}, "log": log}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_settlds_sdks_create_complete_and_settle_jobs_that_verify(serving: dict[str, Any], tmp_path: Path) -> None:
    server_keys = tmp_path / "server_keys.json"
    server_keys.write_text(json.dumps(serving["server"]), encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    run = subprocess.run(["node", str(SCRIPT), str(REFERENCE_DIR), serving["origin"], serving["key"], TENANT,
                          str(work), str(server_keys)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"{run.stderr[-4000:]}\n--- serve log ---\n{serving['log'].read_text()[-3000:]}"
    summary = json.loads(run.stdout)
    assert [job["status"] for job in summary["jobs"]] == ["SETTLED", "SETTLED", "COMPLETED"]
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({**summary["signers"], **serving["server"]}), encoding="utf-8")
    for job in summary["jobs"]:
        stream = tmp_path / f"{job['jobId']}.json"
        stream.write_text(json.dumps(job["events"], ensure_ascii=False), encoding="utf-8")
        verified = _cli("verify", str(stream), "--keys", str(keys))
        assert verified.returncode == 0, verified.stdout + verified.stderr
        robot = [e for e in job["events"] if e["actor"]["type"] == "robot"]
        assert robot and all(e["signerKeyId"] in summary["signers"] for e in robot)
        # what the server stored is what settld's clients sent and were answered
        with httpx.Client(base_url=serving["origin"], headers={"authorization": f"Bearer {serving['key']}"}) as api:
            assert api.get(f"/v1/jobs/{job['jobId']}/export").json() == job["events"]
