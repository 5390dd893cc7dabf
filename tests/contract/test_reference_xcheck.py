"""Opt-in cross-check against the settld 0.1.0 reference itself: streams from the live-path property generator
are run through the reference's own reducer and ledger posting rules under node, and settlekit must post the same
entries. Skipped unless SETTLEKIT_REFERENCE_DIR names a settld checkout and `node` is on the PATH (the suite never
needs either)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from test_property_live import job_streams

from settlekit.events.canonical import canonical_json, parse_json
from settlekit.jobs import process_job_events

REFERENCE_DIR = os.environ.get("SETTLEKIT_REFERENCE_DIR")
SCRIPT = Path(__file__).resolve().parent.parent / "reference" / "ledger_xcheck.mjs"

pytestmark = pytest.mark.skipif(
    not REFERENCE_DIR or shutil.which("node") is None,
    reason="set SETTLEKIT_REFERENCE_DIR to a settld 0.1.0 checkout (and have node) to cross-check",
)


def test_generated_streams_post_like_the_reference(tmp_path: Path) -> None:
    streams: list[list[dict[str, Any]]] = []

    @settings(max_examples=60, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(events=job_streams())
    def collect(events: list[dict[str, Any]]) -> None:
        streams.append(events)

    collect()
    source = tmp_path / "streams.json"
    source.write_text(json.dumps(streams, ensure_ascii=False), encoding="utf-8")
    run = subprocess.run(["node", str(SCRIPT), str(REFERENCE_DIR), str(source)], capture_output=True, text=True,
                         check=True, timeout=300)
    compared = 0
    for events, reference in zip(streams, parse_json(run.stdout), strict=True):
        assert reference["reduceError"] is None, reference["reduceError"]  # the generator makes valid streams
        mine = process_job_events(None, events)
        assert canonical_json(mine.ledger_entries) == canonical_json(reference["entries"]), events[0]["streamId"]
        compared += 1
    assert compared == len(streams) > 0
