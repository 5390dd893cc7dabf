"""Opt-in cross-check against the settld 0.1.0 reference itself: streams from the live-path property generator
are run through the reference's own reducer and ledger posting rules, and its artifact worker, under node;
settlekit must post the same entries and derive the same outbox and byte-identical artifacts. Skipped unless
SETTLEKIT_REFERENCE_DIR names a settld checkout and `node` is on the PATH (the suite never needs either).
SETTLEKIT_XCHECK_EXAMPLES sets how many streams (60)."""

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

from settlekit.artifacts.build import build_all, derive_outbox
from settlekit.events.canonical import canonical_json, parse_json
from settlekit.jobs import process_job_events

REFERENCE_DIR = os.environ.get("SETTLEKIT_REFERENCE_DIR")
SCRIPT = Path(__file__).resolve().parent.parent / "reference" / "ledger_xcheck.mjs"
ARTIFACTS_SCRIPT = SCRIPT.with_name("artifacts_xcheck.mjs")
GENERATED_AT = "2026-02-01T00:00:00.000Z"
EXAMPLES = int(os.environ.get("SETTLEKIT_XCHECK_EXAMPLES", "60"))  # more for a longer campaign

pytestmark = pytest.mark.skipif(
    not REFERENCE_DIR or shutil.which("node") is None,
    reason="set SETTLEKIT_REFERENCE_DIR to a settld 0.1.0 checkout (and have node) to cross-check",
)


def _generated_streams() -> list[list[dict[str, Any]]]:
    streams: list[list[dict[str, Any]]] = []

    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(events=job_streams())
    def collect(events: list[dict[str, Any]]) -> None:
        streams.append(events)

    collect()
    return streams


def test_generated_streams_post_like_the_reference(tmp_path: Path) -> None:
    streams = _generated_streams()
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


def test_generated_streams_build_the_reference_artifacts(tmp_path: Path) -> None:
    streams = _generated_streams()
    source, answer = tmp_path / "streams.json", tmp_path / "artifacts.json"
    source.write_text(json.dumps(streams, ensure_ascii=False), encoding="utf-8")
    subprocess.run(["node", str(ARTIFACTS_SCRIPT), str(REFERENCE_DIR), str(source), GENERATED_AT, str(answer)],
                   capture_output=True, text=True, check=True, timeout=600)
    built = 0
    for events, reference in zip(streams, parse_json(answer.read_text(encoding="utf-8")), strict=True):
        assert reference["error"] is None, reference["error"]
        assert derive_outbox(events) == reference["outbox"], events[0]["streamId"]
        mine = build_all(events, generated_at=GENERATED_AT)
        assert [canonical_json(a) for a in mine] == [canonical_json(a) for a in reference["artifacts"]], \
            events[0]["streamId"]
        built += len(mine)
    assert built > 0
