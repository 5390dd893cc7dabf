"""CLI commands given odd files or instants: one error line and exit 2 (or 1), never a traceback. Before, a file
nested deeper than Python's parsers go, a list of non-objects, a broken `ledger postings` file, a close that is not an
object, a missing journal file and instants outside years 1 to 9999 each ended in an exception."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from settlekit.cli import app

DEEP = "[" * 100_000 + "]" * 100_000


def _run(*args: str) -> Result:
    result = CliRunner().invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result


COMMANDS = [
    ["verify", "{f}"],
    ["artifacts", "build", "--events", "{f}", "--type", "WorkCertificate.v1"],
    ["ledger", "postings", "--events", "{f}"],
    ["import", "{f}", "--db", "sqlite:///{d}/x.db", "--keys", "{f}"],
]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_file_nested_deeper_than_pythons_parsers_go(tmp_path: Path, command: list[str]) -> None:
    """Node reads JSON at any depth, and so do the commands: the file is read, then refused as what it holds (an
    array of arrays, not of events), as `[[1]]` would be: `verify` reports event 0 (exit 1), the others exit 2."""
    deep = tmp_path / "deep.json"
    deep.write_text(DEEP)
    result = _run(*[a.format(f=deep, d=tmp_path) for a in command])
    assert result.exit_code == (1 if command[0] == "verify" else 2), result.output
    assert "JSON_INVALID" not in result.output


@pytest.mark.parametrize("command", COMMANDS)
def test_a_deep_file_that_is_not_json(tmp_path: Path, command: list[str]) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text(DEEP[:-1])
    result = _run(*[a.format(f=deep, d=tmp_path) for a in command])
    assert result.exit_code == 2 and "JSON_INVALID" in result.output


@pytest.mark.parametrize("content", ["[1, 2, 3]", '[{"type": "JOB_CREATED"}, 7]', "[{"])
def test_ledger_postings_of_an_odd_file(tmp_path: Path, content: str) -> None:
    events = tmp_path / "s.json"
    events.write_text(content)
    assert _run("ledger", "postings", "--events", str(events)).exit_code == 2


@pytest.mark.parametrize("content", ["[1, 2, 3]", '[{"type": "JOB_CREATED", "payload": 5}]'])
def test_artifacts_build_of_an_odd_file(tmp_path: Path, content: str) -> None:
    events = tmp_path / "s.json"
    events.write_text(content)
    assert _run("artifacts", "build", "--events", str(events), "--type", "WorkCertificate.v1").exit_code in (1, 2)


@pytest.mark.parametrize(("artifact", "journal"), [("[1, 2, 3]", "x"), ('{"artifactType": "MonthClose.v1"}', None)])
def test_verify_a_close_and_journal_that_are_odd(tmp_path: Path, artifact: str, journal: str | None) -> None:
    close = tmp_path / "close.json"
    close.write_text(artifact)
    csv = tmp_path / "journal.csv"
    if journal is not None:
        csv.write_text(journal)
    assert _run("verify", "--artifact", str(close), "--journal", str(csv)).exit_code in (1, 2)


@pytest.mark.parametrize("instant", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"])
def test_instants_outside_the_utc_years(db_url: str, instant: str) -> None:
    from settlekit.store.db import connect

    database = connect(db_url)
    database.migrate()
    database.close()
    balances = _run("ledger", "balances", "--db", db_url, "--as-of", instant)
    assert balances.exit_code == 2 and "LEDGER_AS_OF_INVALID" in balances.output
    assert _run("deliveries", "requeue", "--db", db_url, "--tenant", "t", "--since", instant).exit_code == 2
