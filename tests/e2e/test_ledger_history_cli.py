"""`settlekit ledger balances --as-of/--position/--party` and `settlekit ledger history ACCOUNT`."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from settlekit.cli.ledger import ledger_app
from settlekit.store import ledger as ledger_rows
from settlekit.store.db import connect
from support.ledger import TENANT, load_vectors


def _db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with connect(url) as db:
        db.migrate()
        load_vectors(db)
    return url


def _lines(args: list[str]) -> list[dict]:
    result = CliRunner().invoke(ledger_app, args)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_balances_as_of_and_history(tmp_path: Path) -> None:
    url = _db(tmp_path)
    with connect(url) as db:
        now = ledger_rows.balances(db, TENANT)[TENANT]
    late = _lines(["balances", "--db", url, "--tenant", TENANT, "--as-of", "2100-01-01T00:00:00Z"])
    assert {r["accountId"]: r["balanceCents"] for r in late if "accountId" in r} == now
    early = _lines(["balances", "--db", url, "--tenant", TENANT, "--as-of", "2000-01-01T00:00:00Z"])
    assert early == [{"tenantId": TENANT, "totalCents": 0}]
    assert _lines(["balances", "--db", url, "--tenant", TENANT, "--position", "0"])[-1]["totalCents"] == 0
    assert len(_lines(["balances", "--db", url, "--tenant", TENANT, "--party", "pty_platform"])) > 1
    every = _lines(["history", "acct_cash", "--db", url, "--tenant", TENANT])
    assert len(every) > 2 and all(r["entryId"] for r in every)
    first = _lines(["history", "acct_cash", "--db", url, "--tenant", TENANT, "--limit", "2"])
    assert first[:2] == every[:2] and first[2]["nextCursor"]
    rest = _lines(["history", "acct_cash", "--db", url, "--tenant", TENANT, "--limit", "100",
                   "--cursor", first[2]["nextCursor"]])
    assert rest[:-1] == every[2:] and rest[-1] == {"nextCursor": None}


def test_bad_input_exits_with_the_code(tmp_path: Path) -> None:
    url = _db(tmp_path)
    runner = CliRunner()
    bad_time = runner.invoke(ledger_app, ["balances", "--db", url, "--as-of", "soon"])
    assert bad_time.exit_code == 2 and "LEDGER_AS_OF_INVALID" in bad_time.output
    unknown = runner.invoke(ledger_app, ["history", "acct_nope", "--db", url, "--tenant", TENANT])
    assert unknown.exit_code == 1 and "LEDGER_ACCOUNT_NOT_FOUND" in unknown.output
    cursor = runner.invoke(ledger_app, ["history", "acct_cash", "--db", url, "--cursor", "zz"])
    assert cursor.exit_code == 2 and "CURSOR_INVALID" in cursor.output


def test_rebuild_reports_and_applies(tmp_path: Path) -> None:
    url = _db(tmp_path)
    runner = CliRunner()
    clean = runner.invoke(ledger_app, ["rebuild", "--db", url, "--json"])
    assert clean.exit_code == 0, clean.output
    assert json.loads(clean.stdout)["differences"] == [] and json.loads(clean.stdout)["streams"] == 6
    with connect(url) as db, db.transaction() as tx:
        tx.execute("UPDATE ledger_allocations SET amount_cents = 1 WHERE entry_id = 'jnl_evt_settle_completed_0003'"
                   " AND posting_id = 'p1' AND tenant_id = ?", (TENANT,))
    found = runner.invoke(ledger_app, ["rebuild", "--db", url, "--tenant", TENANT])
    assert found.exit_code == 1
    assert "1 difference(s)" in found.stdout and "allocation" in found.stdout and "changed" in found.stdout
    applied = runner.invoke(ledger_app, ["rebuild", "--db", url, "--apply", "--json"])
    assert applied.exit_code == 0 and json.loads(applied.stdout)["applied"] is True
    assert runner.invoke(ledger_app, ["rebuild", "--db", url]).exit_code == 0
