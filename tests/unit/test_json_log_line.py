"""The request log line written directly (runtime.logging.write_json_line) is the line the JSON handler writes for
the same record, and it is written that way only when that handler is the record's one destination."""

from __future__ import annotations

import contextlib
import io
import json
import logging
from collections.abc import Iterator

import pytest

from settlekit.runtime import logging as logs


@contextlib.contextmanager
def _json_handler_alone() -> Iterator[io.StringIO]:
    """The JSON handler as the root's only handler (pytest's capture handlers are set aside meanwhile)."""
    out = io.StringIO()
    root = logging.getLogger()
    others = list(root.handlers)
    for handler in others:
        root.removeHandler(handler)
    logs.configure_logging("INFO", stream=out)
    logs.clear()
    try:
        yield out
    finally:
        logs.clear()
        logs.reset_logging()
        root.setLevel(logging.WARNING)
        for handler in others:
            root.addHandler(handler)


def _without_timestamp(line: str) -> tuple[list[str], dict[str, object]]:
    event = json.loads(line)
    assert str(event.pop("timestamp")).endswith("Z")
    return list(event), event


@pytest.mark.parametrize("level", [logging.INFO, logging.ERROR])
def test_the_direct_line_is_the_handlers_line(level: int) -> None:
    log = logging.getLogger("settlekit.api.request")
    fields = {"request_id": "req-1", "method": "POST", "path": "/v1/jobs/j/events", "route": "/v1/jobs/{job_id}",
              "status": 201, "duration_ms": 1.25, "tenant": "t1", "key_id": "k1", "text": "é \U0001f600"}
    with _json_handler_alone() as stream:
        logs.bind(request_id="req-1", tenant="t1", key_id="k1", other="x")
        assert logs.write_json_line(log, level, "request", dict(fields))
        log.log(level, "request", extra=dict(fields))
    direct, standard = stream.getvalue().splitlines()
    assert _without_timestamp(direct) == _without_timestamp(standard)


def test_another_destination_or_a_filter_takes_the_usual_way() -> None:
    log = logging.getLogger("settlekit.api.request")
    with _json_handler_alone() as stream:
        other = logging.StreamHandler(io.StringIO())
        logging.getLogger().addHandler(other)
        try:
            assert not logs.write_json_line(log, logging.INFO, "request", {})
        finally:
            logging.getLogger().removeHandler(other)
        dropped = logging.Filter("elsewhere")
        logging.getLogger("settlekit.api").addFilter(dropped)
        try:
            assert not logs.write_json_line(log, logging.INFO, "request", {})
        finally:
            logging.getLogger("settlekit.api").removeFilter(dropped)
        assert stream.getvalue() == ""
        assert logs.write_json_line(log, logging.INFO, "request", {})
