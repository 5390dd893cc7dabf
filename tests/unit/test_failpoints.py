"""settlekit.failpoints: named hooks, a no-op unless a test arms them; the package itself never arms one."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from settlekit import failpoints

PACKAGE = Path(failpoints.__file__).resolve().parent


def test_an_unarmed_point_is_a_no_op() -> None:
    assert failpoints._armed is None
    assert failpoints.hit("dispatch.before_commit", "c") is None


def test_an_armed_point_runs_its_hook_and_returns_its_result() -> None:
    calls: list[tuple[object, ...]] = []
    failpoints.arm("delivery.claimed", lambda *args: calls.append(args) or "answer")
    assert failpoints.hit("delivery.claimed", "w1") == "answer"
    assert failpoints.hit("delivery.sent", "w1") is None
    assert calls == [("w1",)]
    failpoints.disarm("delivery.claimed")
    assert failpoints._armed is None


def test_unknown_points_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown failpoint"):
        failpoints.arm("no.such.point", lambda: None)


def test_every_point_hit_in_the_package_is_declared_and_nothing_arms() -> None:
    hit: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    isinstance(node.func.value, ast.Name) and node.func.value.id == "failpoints":
                assert node.func.attr == "hit", f"{path.name} calls failpoints.{node.func.attr}"
                first = node.args[0]
                assert isinstance(first, ast.Constant), f"{path.name}: failpoint names are literals"
                hit.add(first.value)
    assert hit == set(failpoints.POINTS)
