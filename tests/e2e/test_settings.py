"""The settings: one validated object, flags over the environment, a bad value is one line and exit 2, and the
README documents every setting."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from settlekit.cli import app
from settlekit.errors import ConfigurationError
from settlekit.runtime.settings import Settings, env_var, flag, settings_table

ROOT = Path(__file__).resolve().parents[2]


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SETTLEKIT_")}


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "settlekit.cli", *args], capture_output=True, text=True,
                          timeout=60, env={**_clean_env(), **(env or {})})


def test_names_are_shared_by_variable_and_flag() -> None:
    assert (env_var("db_url"), flag("db_url")) == ("SETTLEKIT_DB", "--db")
    assert (env_var("delivery_lease"), flag("delivery_lease")) == ("SETTLEKIT_DELIVERY_LEASE", "--delivery-lease")


def test_flags_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SETTLEKIT_DB", "sqlite:///from-env.db")
    monkeypatch.setenv("SETTLEKIT_PORT", "9001")
    monkeypatch.setenv("SETTLEKIT_ALLOWED_WEBHOOK_NETWORKS", "10.1.0.0/16")
    assert (Settings().db_url, Settings().port) == ("sqlite:///from-env.db", 9001)
    given = Settings(db_url="sqlite:///from-flag.db", port=None, allowed_webhook_networks=("10.2.0.0/16",))
    assert (given.db_url, given.port) == ("sqlite:///from-flag.db", 9001)  # None: the flag was not given
    assert given.allowed_webhook_networks == ("10.2.0.0/16",)
    monkeypatch.setenv("SETTLEKIT_PORT", "")  # empty is unset
    assert Settings().port == 8080


@pytest.mark.parametrize(("variable", "value", "problem"), [
    ("SETTLEKIT_PORT", "eighty", "SETTLEKIT_PORT (--port): input should be a valid integer"),
    ("SETTLEKIT_PORT", "70000", "SETTLEKIT_PORT (--port): input should be less than or equal to 65535"),
    ("SETTLEKIT_ALLOW_PRIVATE_WEBHOOKS", "maybe", "SETTLEKIT_ALLOW_PRIVATE_WEBHOOKS (--allow-private-webhooks)"),
    ("SETTLEKIT_ALLOWED_WEBHOOK_NETWORKS", "10.0.0.0/33", "'10.0.0.0/33' is not a CIDR"),
    ("SETTLEKIT_DELIVERY_TIMEOUT", "0", "SETTLEKIT_DELIVERY_TIMEOUT (--delivery-timeout): input should be greater"),
    ("SETTLEKIT_LOG_LEVEL", "chatty", "SETTLEKIT_LOG_LEVEL (--log-level): input should be 'DEBUG'"),
])
def test_a_bad_value_names_the_variable_and_the_flag(monkeypatch: pytest.MonkeyPatch, variable: str, value: str,
                                                     problem: str) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError) as caught:
        Settings()
    assert caught.value.code == "SETTINGS_INVALID"
    assert problem in caught.value.message and "\n" not in caught.value.message


def test_a_bad_flag_is_refused_like_a_bad_variable() -> None:
    with pytest.raises(ConfigurationError, match=r"SETTLEKIT_CLEANUP_INTERVAL \(--cleanup-interval\)"):
        Settings(cleanup_interval=-1.0)
    with pytest.raises(ConfigurationError, match="unknown setting 'no_such_setting'"):
        Settings(no_such_setting=1)


@pytest.mark.parametrize("command", ["worker", "serve"])
def test_a_bad_setting_stops_the_process_with_one_line_and_exit_2(tmp_path: Path, command: str) -> None:
    db = f"sqlite:///{tmp_path / 'settlekit.db'}"
    proc = run_cli(command, "--db", db, env={"SETTLEKIT_CLEANUP_INTERVAL": "soon"})
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error SETTINGS_INVALID: SETTLEKIT_CLEANUP_INTERVAL (--cleanup-interval): input should "
                           "be a valid number"), line
    assert "Traceback" not in proc.stderr and not (tmp_path / "settlekit.db").exists()
    proc = run_cli(command, "--db", db, "--delivery-max-attempts", "0")
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error SETTINGS_INVALID: SETTLEKIT_DELIVERY_MAX_ATTEMPTS (--delivery-max-attempts)")


def test_settings_command_shows_the_values_in_effect() -> None:
    result = CliRunner().invoke(app, ["settings", "--json"], env={"SETTLEKIT_METRICS_PORT": "9102"})
    assert result.exit_code == 0, result.output
    assert '"metrics_port": 9102' in result.stdout


def test_readme_documents_every_setting() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert settings_table() in readme, "README is out of date: paste `settlekit settings --markdown`"
    for name in Settings.model_fields:
        assert f"| `{env_var(name)}` | `{flag(name)}` |" in readme


def test_every_settings_flag_is_a_flag_of_a_command() -> None:
    """The table promises a flag per setting: some command must take it."""
    import typer.main

    command = typer.main.get_command(app)
    options: set[str] = set()

    def collect(group: object) -> None:
        for sub in getattr(group, "commands", {}).values():
            collect(sub)
        for param in getattr(group, "params", []):
            options.update(getattr(param, "opts", []))

    collect(command)
    missing = [flag(name) for name in Settings.model_fields if flag(name) not in options]
    assert missing == []


def test_database_options_carry_pooler_and_outage_settings_to_postgresql_only(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("SETTLEKIT_"):
            monkeypatch.delenv(name)
    assert Settings(db_url="sqlite:///x.db", db_direct="postgresql://db/x").database_options() == {}
    monkeypatch.setenv("SETTLEKIT_DB_PREPARED_STATEMENTS", "false")
    monkeypatch.setenv("SETTLEKIT_DB_DIRECT", "postgresql://primary/x")
    monkeypatch.setenv("SETTLEKIT_DB_UNAVAILABLE_HOLD", "2.5")
    monkeypatch.setenv("SETTLEKIT_DB_STATEMENT_TIMEOUT", "3")
    monkeypatch.setenv("SETTLEKIT_DB_POOL_TIMEOUT", "0.5")
    options = Settings(db_url="postgresql://pooler/x").database_options()
    assert options == {"direct_url": "postgresql://primary/x", "prepared_statements": False,
                       "unavailable_hold": 2.5, "timeout": 0.5, "statement_timeout": 3.0}
    # the one-off commands: no deadline
    assert Settings(db_url="postgresql://pooler/x").database_options(deadline=False)["statement_timeout"] is None
    assert Settings(db_url="postgresql://db/x", db_direct=" ").database_options()["direct_url"] is None


def test_an_api_built_from_a_url_takes_the_database_options_for_that_url(tmp_path: Path, pg_url: str) -> None:
    """create_app(url, settings) opens `url` with the settings' options for it: none for SQLite (a PostgreSQL
    db_url in the settings is no reason to refuse it), the outage and pooler options for PostgreSQL whatever
    db_url says, and db_direct only for db_url's own database."""
    from prometheus_client import CollectorRegistry

    from settlekit.api.app import create_app

    settings = Settings(db_url="postgresql://pooler/x", db_direct="postgresql://primary/x",
                        db_unavailable_hold=2.5, db_prepared_statements=False)
    assert settings.database_options("sqlite:///x.db") == {}
    assert settings.database_options("postgresql://other/y") == {
        "direct_url": None, "prepared_statements": False, "unavailable_hold": 2.5, "timeout": 1.5,
        "statement_timeout": 2.0}
    assert settings.database_options("postgresql://pooler/x") == settings.database_options()
    for url in (f"sqlite:///{tmp_path / 'api.db'}", pg_url):
        api = create_app(url, settings, server_signer=None, registry=CollectorRegistry())
        db = api.state.settlekit.db
        try:
            assert db.url == url
            if url == pg_url:
                assert db.reachability.hold == 2.5 and db.direct_url == pg_url
                assert db.statement_timeout == 2.0 and db.pool.timeout == 1.5
        finally:
            db.close()
