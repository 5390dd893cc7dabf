"""Typed answers (api/schemas.py, api/responses.py): handlers return the models the OpenAPI document is generated
from, `dumps` renders a model exactly as pydantic dumps it (members, aliases, exclusions, order), and stored JSON
carried `Verbatim` is answered as it was read, neither validated nor copied."""

from __future__ import annotations

import inspect
import json
import typing
from typing import Any

import pytest
from fastapi.routing import APIRoute
from prometheus_client import CollectorRegistry
from pydantic import BaseModel
from starlette.responses import Response

from settlekit.api import schemas
from settlekit.api.app import create_app
from settlekit.api.responses import JsonResponse, TypedRoute, dumps
from settlekit.runtime.settings import Settings


def _ordered(raw: bytes | str) -> Any:
    """JSON read with its members' order kept (as lists of pairs), so two renderings compare key order too."""
    return json.loads(raw, object_pairs_hook=list)


def _as_pydantic_dumps(model: BaseModel) -> Any:
    return _ordered(json.dumps(model.model_dump(by_alias=True)))


def _state(**gap: Any) -> schemas.ConsumerState:
    return schemas.ConsumerState.model_validate({
        "name": "c", "instanceId": "*", "status": "idle", "storedStatus": "idle", "processing": False,
        "lastProcessedPosition": 3, "attempts": 0, "rearmCount": 0, "pendingGaps": [{"from": 1, "to": 2, **gap}],
        "lastError": None, "skippedCount": 0, "updatedAt": "2026-01-01T00:00:00Z"})


@pytest.mark.parametrize("model", [
    schemas.Health(status="ok", pid=7),
    _state(xmax="9"),  # a gap seen at an unknown time: no `at` member
    _state(xmax="9", at=1.5),
    schemas.Skipped(consumer=_state(xmax="1"), skippedPosition=None),
    schemas.Artifact({"generatedAt": "t", "artifactType": "WorkCertificate.v1", "z": [1, {"b": 2, "a": 1}]}),
    schemas.JobView(jobId="job_1", version=2, headChainHash="h", job={"status": "BOOKED", "n": 2**70}),
], ids=lambda m: type(m).__name__)
def test_a_model_is_rendered_as_pydantic_dumps_it(model: BaseModel) -> None:
    assert _ordered(dumps(model)) == _as_pydantic_dumps(model)


def test_a_gap_of_unknown_time_has_no_at_member() -> None:
    assert _ordered(dumps(_state(xmax="9")))[8] == ("pendingGaps", [[("from", 1), ("to", 2), ("xmax", "9")]])


def test_stored_json_is_carried_as_it_was_read() -> None:
    # what an older version stored (a null payload, an actor with a member of its own) is answered as it is
    event = {"v": 1, "id": "e1", "actor": {"type": "robot", "id": "r1", "fleet": "f"}, "payload": None}
    answer = schemas.JobEvents(jobId="job_1", events=[event])
    assert answer.events[0] is event
    assert json.loads(dumps(answer)) == {"jobId": "job_1", "events": [event]}
    document = {"b": 1, "artifactType": "X", "a": {"y": 1, "x": 2}}
    assert schemas.Artifact(document).root is document
    assert dumps(schemas.Artifact(document)) == b'{"b":1,"artifactType":"X","a":{"y":1,"x":2}}'


def test_stored_json_at_any_depth_is_rendered() -> None:
    deep: Any = "leaf"
    for _ in range(2000):
        deep = {"k": deep}
    event = {"id": "e1", "payload": deep}
    rendered = dumps(schemas.JobEvents(jobId="job_1", events=[event]))
    assert rendered.startswith(b'{"jobId":"job_1","events":[{"id":"e1","payload":{"k":{"k":')
    assert rendered.count(b'"k"') == 2000


def test_a_closed_answer_refuses_a_member_it_does_not_declare() -> None:
    with pytest.raises(ValueError, match="extra"):
        schemas.JobView.model_validate({"jobId": "j", "version": 1, "headChainHash": "h", "job": None, "more": 1})


@pytest.fixture(scope="module")
def routes(tmp_path_factory: pytest.TempPathFactory) -> list[APIRoute]:
    app = create_app(f"sqlite:///{tmp_path_factory.mktemp('typed')}/api.db", Settings(), server_signer=None,
                     registry=CollectorRegistry())
    return [r for r in app.routes if isinstance(r, APIRoute)]


def _returns(route: APIRoute) -> Any:
    endpoint = inspect.unwrap(route.endpoint)
    return typing.get_type_hints(endpoint, include_extras=False).get("return")


def test_every_json_answer_is_a_handler_s_typed_model(routes: list[APIRoute]) -> None:
    """A read returns its model (the route's response_model, taken from the handler's annotation); a write
    returns the Response `api.idempotency` rendered from its action's model; no handler builds a JSON dict."""
    typed = 0
    for route in routes:
        returned = _returns(route)
        label = f"{sorted(route.methods or ())} {route.path}"
        assert returned is not JsonResponse, label
        if inspect.isclass(returned) and issubclass(returned, BaseModel):
            assert isinstance(route, TypedRoute), label
            assert route.response_model is returned, label
            typed += 1
        elif route.response_model is not None:
            assert returned in (Response, schemas.Ready | Response), label
    assert typed >= 25
