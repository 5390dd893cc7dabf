"""What every command shares: read commands refuse a missing SQLite file, `--json`, the `api-keys` group and
its earlier name, the hidden flag aliases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from settlekit.cli import app


@pytest.mark.parametrize("args", [
    ["export", "--stream", "job_1"],
    ["ledger", "balances"],
    ["api-keys", "list"],
    ["consumers", "list"],
    ["consumers", "status", "settlekit:artifacts"],
    ["deliveries", "list", "--tenant", "t"],
    ["deliveries", "destinations", "list", "--tenant", "t"],
], ids=lambda a: "-".join(a[:2]))
def test_read_commands_refuse_a_missing_sqlite_file(tmp_path: Path, args: list[str]) -> None:
    path = tmp_path / "typo.db"
    result = CliRunner().invoke(app, [*args, "--db", f"sqlite:///{path}"])
    assert result.exit_code == 1, result.output
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error DATABASE_NOT_FOUND: no SQLite database at")
    assert not path.exists()


def test_api_keys_group_json_and_its_earlier_name(sqlite_url: str) -> None:
    runner = CliRunner()
    created = runner.invoke(app, ["api-keys", "create", "--db", sqlite_url, "--tenant", "t1", "--scopes", "ops",
                                  "--json"])
    assert created.exit_code == 0, created.output
    body = json.loads(created.stdout)
    assert body["tenantId"] == "t1" and body["key"].startswith(f"sk_{body['keyId']}_")
    listed = runner.invoke(app, ["keys", "list", "--db", sqlite_url, "--json"])  # the earlier name still works
    assert listed.exit_code == 0, listed.output
    assert [k["keyId"] for k in json.loads(listed.stdout)] == [body["keyId"]]
    import typer.main

    group = typer.main.get_command(app)
    assert group.commands["keys"].hidden and not group.commands["api-keys"].hidden  # type: ignore[attr-defined]


def test_migrate_and_contracts_print_json(sqlite_url: str) -> None:
    result = CliRunner().invoke(app, ["migrate", "--db", sqlite_url, "--json"])
    assert result.exit_code == 0, result.output
    assert isinstance(json.loads(result.stdout)["applied"], list)


def test_the_db_setting_is_the_default_of_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "from-env.db"
    monkeypatch.setenv("SETTLEKIT_DB", f"sqlite:///{path}")
    assert CliRunner().invoke(app, ["migrate"]).exit_code == 0
    assert path.is_file()


@pytest.mark.parametrize(("tenant", "destination_id"), [("a/../../escaped", "x"), ("..", "x"), ("t", "../../x"),
                                                        ("t/x", "y"), ("", "x")])
def test_a_generated_secret_file_stays_in_the_secrets_dir(tmp_path: Path, sqlite_url: str, tenant: str,
                                                          destination_id: str) -> None:
    """`destinations add --generate-secret` names its file after the tenant and the destination: a tenant or an id
    that is not a tenant id or a destination id (a path separator, `..`) is refused (exit 1, SCHEMA_INVALID) before
    any file is written, and no destination is saved."""
    runner = CliRunner()
    assert runner.invoke(app, ["migrate", "--db", sqlite_url]).exit_code == 0
    secrets = tmp_path / "deep" / "sec"
    before = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    r = runner.invoke(app, ["deliveries", "destinations", "add", "--db", sqlite_url, "--tenant", tenant,
                            "--id", destination_id, "--url", "http://127.0.0.1:9/", "--generate-secret",
                            "--secret-dir", str(secrets), "--allow-loopback", "--allow-insecure-http"])
    assert r.exit_code == 1 and "SCHEMA_INVALID" in r.output, r.output
    assert sorted(p for p in tmp_path.rglob("*") if p.is_file()) == before
    listed = runner.invoke(app, ["deliveries", "destinations", "list", "--db", sqlite_url, "--tenant", tenant,
                                 "--json"])
    assert json.loads(listed.stdout) == []
