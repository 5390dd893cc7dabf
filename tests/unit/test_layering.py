"""The import-linter contracts in pyproject.toml (run by `make lint`): the package keeps them, and a copy of
the package with a deliberate layering violation breaks them."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "settlekit"
CONFIG = ROOT / "pyproject.toml"


def _lint_imports(src: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` with the project's contracts against the package under `src`."""
    exe = Path(sys.executable).parent / "lint-imports"
    assert exe.exists(), "import-linter is a pinned dev dependency: reinstall with `make venv`"
    env = {**os.environ, "PYTHONPATH": str(src), "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run([str(exe), "--config", str(CONFIG), "--no-cache"], cwd=src, env=env,
                          capture_output=True, text=True, check=False)


@pytest.fixture
def package_copy(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(PACKAGE, src / "settlekit", ignore=shutil.ignore_patterns("__pycache__"))
    return src


def _append(path: Path, line: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + f"\n{line}\n", encoding="utf-8")


def _assert_breaks(package: Path, module: str, line: str, *expected: str) -> None:
    """Add `line` to `module` (a path under settlekit/) of the package copy: the lint fails, saying each of
    `expected`."""
    _append(package / "settlekit" / module, line)
    result = _lint_imports(package)
    assert result.returncode == 1, result.stdout
    for text in expected:
        assert text in result.stdout


def test_the_package_keeps_every_contract(package_copy: Path) -> None:
    result = _lint_imports(package_copy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_pure_domain_importing_storage_breaks_the_lint(package_copy: Path) -> None:
    _assert_breaks(package_copy, "ledger/balances.py",
                   "from settlekit.store import db as _db  # noqa",
                   "Pure domain (events, ledger, jobs, artifacts) imports no storage",
                   "settlekit.ledger.balances -> settlekit.store.db")


def test_a_lower_domain_layer_importing_a_higher_one_breaks_the_lint(package_copy: Path) -> None:
    _assert_breaks(package_copy, "events/envelope.py",
                   "import settlekit.jobs.types as _types  # noqa",
                   "Domain layers: artifacts -> jobs -> ledger -> events -> errors BROKEN",
                   "settlekit.events.envelope -> settlekit.jobs.types")


def test_storage_importing_the_api_breaks_the_lint(package_copy: Path) -> None:
    _assert_breaks(package_copy, "store/ledger.py",
                   "import settlekit.api.app as _app  # noqa",
                   "Storage never imports the use cases, the HTTP API, the CLI or the runtime BROKEN")


def test_the_api_reaching_the_store_breaks_the_lint(package_copy: Path) -> None:
    _assert_breaks(package_copy, "api/routes/health.py",
                   "import settlekit.store.finance as _f  # noqa",
                   "The HTTP API, the CLI and the operator console reach the store only through the application "
                   "layer BROKEN",
                   "settlekit.api.routes.health -> settlekit.store.finance")


def test_the_console_reaching_the_store_breaks_the_lint(package_copy: Path) -> None:
    _assert_breaks(package_copy, "console/charts.py",
                   "import settlekit.store.streams as _s  # noqa",
                   "reach the store only through the application layer BROKEN",
                   "settlekit.console.charts -> settlekit.store.streams")


def test_the_api_reaching_the_append_breaks_the_lint(package_copy: Path) -> None:
    _assert_breaks(package_copy, "api/routes/health.py",
                   "import settlekit.append.policy as _p  # noqa",
                   "The HTTP API, the CLI and the operator console reach the append and the consumers of the log "
                   "only through the application layer BROKEN",
                   "settlekit.api.routes.health -> settlekit.append.policy")


def test_the_cli_reaching_the_delivery_worker_breaks_the_lint(package_copy: Path) -> None:
    _assert_breaks(package_copy, "cli/deliveries.py",
                   "import settlekit.delivery.worker as _w  # noqa",
                   "reach the append and the consumers of the log only through the application layer BROKEN",
                   "settlekit.cli.deliveries -> settlekit.delivery.worker")


def test_the_store_importing_a_dialect_folder_breaks_the_lint(package_copy: Path) -> None:
    _assert_breaks(package_copy, "store/database.py",
                   "import settlekit.store.sqlite.backend as _b  # noqa",
                   "No import circles inside the store",
                   "BROKEN")


def test_storage_importing_the_append_use_case_breaks_the_lint(package_copy: Path) -> None:
    _assert_breaks(package_copy, "store/streams.py",
                   "import settlekit.append.policy as _policy  # noqa",
                   "Storage never imports the use cases, the HTTP API, the CLI or the runtime BROKEN",
                   "settlekit.store.streams -> settlekit.append.policy")


def test_a_consumer_of_the_log_calling_the_append_use_case_breaks_the_lint(package_copy: Path) -> None:
    _assert_breaks(package_copy, "projections/sinks.py",
                   "import settlekit.append as _append  # noqa",
                   "-> append -> projections : dispatch : delivery -> store -> domain BROKEN",
                   "settlekit.projections.sinks -> settlekit.append")


def test_the_bottom_helpers_importing_the_package_breaks_the_lint(package_copy: Path) -> None:
    _assert_breaks(package_copy, "failpoints.py",
                   "import settlekit.dispatch.model as _model  # noqa",
                   "settlekit.failpoints -> settlekit.dispatch.model")


SQL_STATEMENT = re.compile(r"\b(SELECT\s.+\sFROM|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM)\b", re.S)


def test_sql_lives_only_in_store() -> None:
    """No string literal outside settlekit/store reads like a SQL statement, and no code outside the backends
    branches on the dialect."""
    offenders = []
    package = ROOT / "src" / "settlekit"
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        text = path.read_text(encoding="utf-8")
        # the client's spool is a file of the client's own, not the server's database (settlekit.client.spool)
        if not rel.startswith("store/") and rel != "client/spool.py":
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL_STATEMENT.search(node.value):
                    offenders.append(f"{rel}:{node.lineno}: SQL")
        if not rel.startswith(("store/postgres/", "store/sqlite/")) and re.search(r"dialect\s*==", text):
            offenders.append(f"{rel}: branches on the dialect")
    assert offenders == []


def test_no_pattern_ends_with_a_dollar() -> None:
    """Python's `$` also matches before a final newline: `re.compile("^[a-z]+$").match("x\\n")` accepts "x\\n" (an id
    stored with a newline). Checks use `fullmatch` (or `\\Z`); a `$` is left only where MULTILINE means "end of line".
    pydantic's `pattern=` runs Rust's regex engine, whose `$` is the end of the text, so it is not concerned."""
    offenders = []
    package = ROOT / "src" / "settlekit"
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "re"
                    and node.func.attr in ("compile", "match", "search") and node.args):
                continue
            pattern = node.args[0]
            flags = ast.unparse(node.args[1]) if len(node.args) > 1 else ""
            flags += "".join(ast.unparse(k.value) for k in node.keywords if k.arg == "flags")
            if (isinstance(pattern, ast.Constant) and isinstance(pattern.value, str)
                    and re.search(r"(?<!\\)\$$", pattern.value) and "MULTILINE" not in flags):
                offenders.append(f"{rel}:{node.lineno}: {pattern.value!r}")
    assert offenders == []
