"""The reducer and the pure artifact builders against settld on payloads of any shape.

`vectors/shapes/shapes.json.gz`: random streams on legal transitions whose payload fields are absent, null, "",
numbers, objects or strings with non-ASCII text and lone surrogates, with settld's reduced job and four artifact
bodies (see `vectors/shapes/make_streams.py`). Payload validation is the append path's concern and is switched off
here: these streams check that every `??`, default and keyed-list rule of the reducer and the builders matches.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from settlekit.artifacts.build import iter_artifacts, stream_identity
from settlekit.artifacts.builders import BuildTask
from settlekit.events.canonical import canonical_json
from settlekit.jobs import reduce

FIXTURE = Path(__file__).resolve().parent.parent / "vectors" / "shapes" / "shapes.json.gz"
DATA = json.loads(gzip.decompress(FIXTURE.read_bytes()))
STREAMS: list[dict[str, Any]] = DATA["streams"]
# fields the worker adds around a builder's body (checked by the differential corpus)
WORKER_FIELDS = {
    "artifactHash", "artifactId", "sourceEventId", "sourceEventType", "sourceEventChainHash", "atChainHash"
}


def test_fixture_covers_the_shapes() -> None:
    assert len(STREAMS) == 40
    types = {e["type"] for s in STREAMS for e in s["events"]}
    assert len(types) >= 50
    text = json.dumps(STREAMS)
    assert "\\ud800" in text and "\\u00e9" in text


@pytest.mark.parametrize("i", range(len(STREAMS)))
def test_snapshot_matches_reference(i: int) -> None:
    s = STREAMS[i]
    assert canonical_json(reduce(s["events"]).snapshot) == canonical_json(s["job"])


@pytest.mark.parametrize("i", range(len(STREAMS)))
def test_builders_match_reference(i: int) -> None:
    s = STREAMS[i]
    events = s["events"]
    last = events[-1]
    tenant, job_id = stream_identity(events)
    tasks = [
        BuildTask(tenant, job_id, last["id"], last["type"], last["chainHash"], last["at"], artifact_type)
        for artifact_type in s["artifacts"]
    ]
    built = {}
    for _, pairs in iter_artifacts(events, tasks, generated_at="2026-02-01T00:00:00.000Z"):
        built = {task.artifact_type: artifact for task, artifact in pairs}
    for artifact_type, expected in s["artifacts"].items():
        ours = {k: v for k, v in built[artifact_type].items() if k not in WORKER_FIELDS}
        theirs = {k: v for k, v in expected.items() if k not in WORKER_FIELDS}
        assert canonical_json(ours) == canonical_json(theirs), artifact_type
