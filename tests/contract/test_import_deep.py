"""Imported history nesting thousands of levels, on both backends: stored, served and delivered as recorded.

settld's API stored events whose payloads nest about 2,000 levels (the offline parity corpus' `deep` streams); the
live path refuses more than 256 levels in new input, but `settlekit import` takes such an event, up to
`MAX_RECORDED_DEPTH` levels, and everything it reaches reads and writes it without recursion: the store on both
backends, the job view and listing (its status filter too), the job's events and export, the event feed, the
artifact projection, webhook bodies, the ledger rebuild, the month close, the console's job page and downloads,
and the offline tools.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from typer.testing import CliRunner

from conftest import VECTORS
from settlekit.append import job_appender
from settlekit.application.finance import close_month
from settlekit.application.imports import import_events
from settlekit.application.ledger import rebuild
from settlekit.artifacts.build import build_all
from settlekit.cli import app as cli
from settlekit.delivery.secrets import store_secret
from settlekit.delivery.sender import SenderConfig
from settlekit.delivery.signing import generate_secret
from settlekit.delivery.sink import WebhookDeliverySink, artifact_loader
from settlekit.delivery.worker import DeliveryWorker, WorkerConfig
from settlekit.dispatch import Dispatcher
from settlekit.events.canonical import canonical_json, parse_json, plain_json, same_json
from settlekit.events.envelope import Signer, finalize
from settlekit.events.recorded import MAX_RECORDED_DEPTH, recorded_envelope
from settlekit.projections.artifact_store import ArtifactStore
from settlekit.projections.artifacts import ArtifactConsumer
from settlekit.store import deliveries
from settlekit.store.db import Database
from support.api import client, key_for
from support.console import make_console_app, sign_in
from support.receiver import FaultyReceiver

TENANT = "tenant_default"
NOW = datetime(2026, 6, 1, tzinfo=UTC)


def _corpus_stream(description: str) -> list[dict[str, Any]]:
    import gzip

    parity = parse_json(gzip.decompress((VECTORS / "reference_runs" / "offline_parity.json.gz").read_bytes()))
    return next(r["events"] for r in parity["runs"] if r["description"] == description)


def _nested(levels: int) -> Any:
    """`levels` arrays and objects, alternating, around a string."""
    value: Any = "bottom"
    for n in range(levels):
        value = {"d": value} if n % 2 else [value]
    return value


def _depth(value: Any) -> int:
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if type(item) in (dict, list):
            deepest = max(deepest, depth + 1)
            stack.extend((child, depth + 1) for child in (item.values() if type(item) is dict else item))
    return deepest


def _rechained(events: list[dict[str, Any]], levels: int) -> list[dict[str, Any]]:
    """The stream with its JOB_CREATED's `constraints.deep` nested so that the event nests `levels` levels, the
    chain made again (the events unsigned, as most recorded ones are)."""
    out: list[dict[str, Any]] = []
    for event in events:
        draft = recorded_envelope(event, len(out))
        if not out:
            draft["payload"] = {**draft["payload"], "constraints": {"deep": _nested(levels - 3)}}
        out.append(finalize(draft, out[-1]["chainHash"] if out else None))
    assert _depth(out[0]) == levels
    return out


DEEP = "d003_basic: deep"  # settld stored it whole; its JOB_CREATED nests 2,003 levels


@pytest.fixture(scope="module")
def streams() -> dict[str, list[dict[str, Any]]]:
    recorded = _corpus_stream(DEEP)
    return {"recorded": recorded, "bound": _rechained(recorded, MAX_RECORDED_DEPTH)}


@pytest.mark.parametrize("which", ["recorded", "bound"])
def test_deep_history_is_stored_served_and_delivered(which: str, streams: dict[str, list[dict[str, Any]]],
                                                     db: Database, tmp_path: Path) -> None:
    events = streams[which]
    job_id = events[0]["streamId"]
    store = job_appender(db)
    result = import_events(store, TENANT, events)
    assert (result.appended, result.refused) == (len(events), None)
    recorded = [recorded_envelope(e, i) for i, e in enumerate(events)]
    assert same_json(store.streams.read_stream(TENANT, job_id), recorded)
    # a re-run recognises every stored event
    assert (import_events(store, TENANT, events).skipped, 0) == (len(events), 0)

    key = key_for(db, TENANT)
    app = make_console_app(db)
    api = client(app, key)
    path = f"/v1/jobs/{quote(job_id, safe='')}"
    view = parse_json(api.get(path).content)
    assert view["version"] == len(events) and _depth(view["job"]) >= MAX_RECORDED_DEPTH - 3 if which == "bound" \
        else view["version"] == len(events)
    listed = parse_json(api.get("/v1/jobs", params={"status": view["job"]["status"]}).content)
    assert [j["jobId"] for j in listed["jobs"]] == [job_id]
    assert parse_json(api.get("/v1/jobs", params={"status": "CANCELLED"}).content)["jobs"] == []
    assert same_json(parse_json(api.get(f"{path}/events").content)["events"], recorded)
    assert same_json(parse_json(api.get(f"{path}/export").content), recorded)
    feed = parse_json(api.get("/v1/events", params={"limit": 100}).content)["events"]
    assert same_json([item["event"] for item in feed], recorded)

    # the artifact projection builds what the offline tools build, and the webhooks carry it
    with FaultyReceiver(secrets=[secret := generate_secret()], tolerance_seconds=10**10) as receiver:
        with db.transaction() as tx:
            ref = store_secret(tx, TENANT, secret)
            deliveries.put_destination(tx, deliveries.Destination(tenant_id=TENANT, destination_id="d1",
                                                                  url=receiver.url, secret_ref=ref), now=NOW)
        Dispatcher(db, [ArtifactConsumer(sink=WebhookDeliverySink()).consumer()], listen=False).drain()
        with db.read() as tx:
            stored = ArtifactStore().list_for_job(tx, TENANT, job_id, limit=100).items
        built = build_all(recorded)
        assert sorted(canonical_json(a.artifact) for a in stored) == sorted(canonical_json(a) for a in built)
        config = WorkerConfig(allow_insecure_http=True, allow_loopback=True,
                              sender=SenderConfig(timeout=10.0, connect_timeout=2.0))

        async def deliver() -> Any:
            async with DeliveryWorker(db, artifact_loader=artifact_loader, config=config) as worker:
                return await worker.run_once()

        assert asyncio.run(deliver()).delivered == len(built)
        assert sorted(canonical_json(a) for a in receiver.received.values()) == sorted(
            canonical_json(a) for a in built)
    for artifact in stored:
        got = api.get(f"/v1/artifacts/{quote(artifact.artifact['artifactId'], safe='')}")
        assert got.status_code == 200 and same_json(parse_json(got.content), artifact.artifact)

    # the console shows the job (every event verified), its export and its artifacts
    browser, _ = sign_in(app, key)
    page = browser.get("/console/job", params={"id": job_id})
    assert page.status_code == 200 and page.text.count('class="ok">verified') == len(events)
    export = browser.get("/console/job/export", params={"id": job_id})
    assert export.status_code == 200 and same_json(parse_json(export.content), recorded)
    shown = browser.get("/console/artifact", params={"id": stored[0].artifact["artifactId"]})
    assert shown.status_code == 200 and same_json(parse_json(shown.content), stored[0].artifact)

    report = rebuild(db, tenant_id=TENANT)
    assert report.differences == []
    closed = close_month(db, TENANT, events[0]["at"][:7], Signer.generate(), now=NOW)
    assert closed.document["artifactType"] == "MonthClose.v1"

    # the offline tools read the file at any depth
    stream = tmp_path / "stream.json"
    stream.write_text(plain_json(events), encoding="utf-8")
    runner = CliRunner()
    verified = runner.invoke(cli, ["verify", str(stream)])
    assert verified.exit_code == 0 and json.loads(verified.stdout.strip().splitlines()[-1])["ok"] is True
    assert runner.invoke(cli, ["ledger", "postings", "--events", str(stream)]).exit_code == 0
    offline = runner.invoke(cli, ["artifacts", "build-all", "--events", str(stream)])
    assert offline.exit_code == 0 and same_json(parse_json(offline.stdout), built)


def test_history_deeper_than_the_bound_is_refused_with_nothing_written(
        streams: dict[str, list[dict[str, Any]]], db: Database) -> None:
    events = _rechained(streams["recorded"], MAX_RECORDED_DEPTH + 1)
    store = job_appender(db)
    result = import_events(store, TENANT, events)
    assert result.appended == 0 and result.refused is not None
    assert (result.refused.index, result.refused.code) == (0, "JSON_INVALID")
    assert store.streams.head(TENANT, events[0]["streamId"]) is None
