"""Finds every error code the package raises or returns, by reading its source with `ast`.

A code is an upper-case string (`SCHEMA_INVALID`) in one of these places:
- a class attribute `code = "..."`;
- a keyword argument `code=` or `*_code=`, or the default of such a parameter;
- the code argument of the helpers that take it by position (`CODE_ARGUMENT` below);
- a `{"code": "..."}` literal, or a value of a code table (a dict assigned to `*_CODES` or `codes`).
Ledger posting reasons (`details.code` of LEDGER_POSTING_INVALID and `error.code` of a recorded posting error) are
found the same way, as a class attribute `reason = "..."`, an assignment to `reason`, or the first argument of
`PostingPreconditionFailed`.

Where the source says the HTTP status (the class's `status`, inherited or not, or a `status=` keyword, or the
helper's own status), it is recorded with the use.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "settlekit"
CODE_SHAPE = re.compile(r"^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*$")

# helpers that take a code by position: name -> (index of the code, index of the status or a fixed status)
CODE_ARGUMENT: dict[str, tuple[int, int | None, int | None]] = {
    "_refuse": (0, None, 409),
    "ServerRuleViolation": (0, None, 409),
    "problem_response": (1, 0, None),
    "_conflict": (1, None, 409),
}
REASON_ARGUMENT: dict[str, int] = {"PostingPreconditionFailed": 0}


@dataclass(frozen=True)
class Use:
    code: str
    where: str  # path:line, relative to the package
    status: int | None  # None: the source does not say it here


def _const(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and CODE_SHAPE.match(node.value):
        return node.value
    return None


def _int(node: ast.AST | None) -> int | None:
    return node.value if isinstance(node, ast.Constant) and type(node.value) is int else None


def _strings(node: ast.AST) -> Iterator[str]:
    """The code-shaped strings of an expression (a constant, either side of `a if c else b`)."""
    if isinstance(node, ast.IfExp):
        yield from _strings(node.body)
        yield from _strings(node.orelse)
    elif (value := _const(node)) is not None:
        yield value


def _name(func: ast.AST) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


class _Classes:
    """Every class of the package: its bases, and its own `code` and `status`."""

    def __init__(self, trees: dict[str, ast.Module]):
        self.bases: dict[str, list[str]] = {}
        self.status: dict[str, int] = {}
        for tree in trees.values():
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    self.bases[node.name] = [n for b in node.bases if (n := _name(b)) is not None]
                    for item in node.body:
                        target, value = _assigned(item)
                        if target == "status" and (s := _int(value)) is not None:
                            self.status[node.name] = s

    def status_of(self, name: str) -> int | None:
        seen: set[str] = set()
        todo = [name]
        while todo:
            current = todo.pop(0)
            if current in seen:
                continue
            seen.add(current)
            if current in self.status:
                return self.status[current]
            todo.extend(self.bases.get(current, []))
        return None

    def is_class(self, name: str) -> bool:
        return name in self.bases or name == "Exception"


def _assigned(node: ast.AST) -> tuple[str | None, ast.AST | None]:
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id, node.value
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id, node.value
    return None, None


def _trees() -> dict[str, ast.Module]:
    return {str(p.relative_to(PACKAGE)): ast.parse(p.read_text(encoding="utf-8"), str(p))
            for p in sorted(PACKAGE.rglob("*.py"))}


def scan() -> tuple[list[Use], list[Use]]:
    """(error codes, ledger posting reasons), each use with where it stands."""
    trees = _trees()
    classes = _Classes(trees)
    codes: list[Use] = []
    reasons: list[Use] = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            where = f"{path}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    target, value = _assigned(item)
                    if target == "code" and (c := _const(value)) is not None:
                        codes.append(Use(c, f"{path}:{item.lineno}", classes.status_of(node.name)))
                    elif target == "reason" and (c := _const(value)) is not None:
                        reasons.append(Use(c, f"{path}:{item.lineno}", None))
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = node.args
                positional = args.posonlyargs + args.args
                pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults, strict=True))
                pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
                for arg, default in pairs:
                    if (arg.arg == "code" or arg.arg.endswith("_code")) and (c := _const(default)) is not None:
                        codes.append(Use(c, where, None))
            elif isinstance(node, ast.Call):
                codes.extend(_call_codes(node, where, classes))
                callee = _name(node.func)
                if callee in REASON_ARGUMENT and len(node.args) > REASON_ARGUMENT[callee]:
                    reasons.extend(Use(c, where, None) for c in _strings(node.args[REASON_ARGUMENT[callee]]))
            elif isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "code":
                        codes.extend(Use(c, where, None) for c in _strings(value))
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                target, value = _assigned(node)
                if target is None or value is None:
                    continue
                if (target.endswith("_CODES") or target == "codes") and isinstance(value, ast.Dict):
                    codes.extend(_table_codes(value, where))
                elif target == "reason":
                    reasons.extend(Use(c, where, None) for c in _strings(value))
    return codes, reasons


def _call_codes(node: ast.Call, where: str, classes: _Classes) -> Iterator[Use]:
    callee = _name(node.func)
    status = None
    for kw in node.keywords:
        if kw.arg == "status":
            status = _int(kw.value)
    if status is None and callee is not None and classes.is_class(callee):
        status = classes.status_of(callee)
    for kw in node.keywords:
        if kw.arg is not None and (kw.arg == "code" or kw.arg.endswith("_code")):
            yield from (Use(c, where, status if kw.arg == "code" else None) for c in _strings(kw.value))
    if callee in CODE_ARGUMENT:
        index, status_index, fixed = CODE_ARGUMENT[callee]
        if len(node.args) > index:
            given = _int(node.args[status_index]) if status_index is not None else fixed
            yield from (Use(c, where, given) for c in _strings(node.args[index]))


def _table_codes(table: ast.Dict, where: str) -> Iterator[Use]:
    """`{404: "NOT_FOUND"}` (status → code), `{"bad_json": ("WEBHOOK_BODY_INVALID", 400)}` (reason → code, status)
    or `{"secret_not_found": "SECRET_NOT_FOUND"}` (reason → code)."""
    for key, value in zip(table.keys, table.values, strict=True):
        if isinstance(value, ast.Tuple) and len(value.elts) == 2 and (c := _const(value.elts[0])) is not None:
            yield Use(c, where, _int(value.elts[1]))
        elif (c := _const(value)) is not None:
            yield Use(c, where, _int(key))


DOC = Path(__file__).resolve().parents[2] / "docs" / "errors.md"


def errors_markdown() -> str:
    """docs/errors.md, generated from `settlekit.errors.CATALOGUE` and `POSTING_REASONS`."""
    from settlekit.errors import CATALOGUE, POSTING_REASONS

    lines = [
        "# Error codes",
        "",
        "Generated from `settlekit.errors.CATALOGUE` by `python tests/support/error_codes.py`; do not edit by hand",
        "(`tests/unit/test_error_catalogue.py` fails when it is out of date).",
        "",
        "Every failure settlekit raises on purpose carries one of these codes. The API answers it as RFC 9457",
        "problem+json with `code` and `title` set to the code and the HTTP status below; the CLI prints the same",
        "code. A framework error without a name here answers `HTTP_<status>`.",
        "",
        "| code | HTTP status | meaning |",
        "|---|---|---|",
    ]
    for code in sorted(CATALOGUE):
        spec = CATALOGUE[code]
        status = ", ".join(str(s) for s in (spec.status, *spec.other_statuses))
        lines.append(f"| `{code}` | {status} | {spec.meaning} |")
    lines += [
        "",
        "## Ledger posting reasons",
        "",
        "`details.code` of a `LEDGER_POSTING_INVALID` error, and `error.code` of a posting error recorded with an",
        "event (the reference's `ledgerErrors`).",
        "",
        "| reason | meaning |",
        "|---|---|",
    ]
    lines += [f"| `{reason}` | {POSTING_REASONS[reason]} |" for reason in sorted(POSTING_REASONS)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    DOC.write_text(errors_markdown(), encoding="utf-8")
    print(f"wrote {DOC}")
