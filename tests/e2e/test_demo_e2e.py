"""The end-to-end demo at a small N on both backends: HTTP appends, artifacts built and delivered to the local
receiver, every stream and delivered artifact verified offline, the ledger balanced."""

from __future__ import annotations

from settlekit.demo import run_demo
from settlekit.simulate import SCENARIO_ORDER


def test_demo_end_to_end(db_url: str) -> None:
    assert run_demo(jobs=len(SCENARIO_ORDER), db_url=db_url) == 0
