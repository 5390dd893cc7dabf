"""ARCHITECTURE.md's table of import contracts says what `[tool.importlinter]` in pyproject.toml enforces: the same
contracts in the same order, a layers contract's layers in its order, and every module a forbidden contract names."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\| `([a-z0-9-]+)` \| (.+) \|$")


def _contracts() -> list[dict[str, Any]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts: list[dict[str, Any]] = config["tool"]["importlinter"]["contracts"]
    return contracts


def _table() -> dict[str, str]:
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    return {m.group(1): m.group(2) for line in text.splitlines() if (m := ROW.match(line))}


def _short(module: str) -> str:
    return module.removeprefix("settlekit.")


def test_the_table_lists_every_contract_in_order() -> None:
    assert list(_table()) == [c["id"] for c in _contracts()]


def test_a_layers_row_gives_the_layers_in_order() -> None:
    table = _table()
    for contract in _contracts():
        if contract["type"] != "layers":
            continue
        layers = [" ".join(_short(part) for part in layer.split()) for layer in contract["layers"]]
        assert table[contract["id"]].split(" (")[0].replace("\\|", "|") == " → ".join(layers), contract["id"]


def test_a_forbidden_row_names_every_module() -> None:
    table = _table()
    for contract in _contracts():
        if contract["type"] != "forbidden":
            continue
        row = table[contract["id"]]
        named = set(re.findall(r"[a-z_][a-z0-9_.]*", row))
        for module in [*contract["source_modules"], *contract["forbidden_modules"]]:
            assert _short(module) in named, (contract["id"], module)
