"""The API's HTTP protocol writes an answer of known length in one write: its head is held for its first body
bytes (api/http_protocol.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from settlekit.api.http_protocol import _OneWriteAnswer


class _Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return False


def _cycle(method: str = "POST") -> Any:
    return SimpleNamespace(response_started=False, chunked_encoding=None, expected_content_length=0,
                           scope={"method": method})


def _start(cycle: Any, *, length: int | None) -> None:
    cycle.response_started = True
    cycle.chunked_encoding = length is None
    cycle.expected_content_length = length or 0


def test_the_head_of_an_answer_of_known_length_goes_with_its_body() -> None:
    transport, cycle = _Transport(), _cycle()
    wrapped = _OneWriteAnswer(transport, cycle)
    wrapped.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # before the answer: as it comes
    _start(cycle, length=2)
    wrapped.write(b"HEAD\r\n\r\n")
    assert transport.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]
    wrapped.write(b"ok")
    assert transport.writes[1:] == [b"HEAD\r\n\r\nok"]
    assert wrapped.is_closing() is False  # the rest is the transport's


def test_chunked_empty_and_head_answers_are_written_as_they_come() -> None:
    for method, length in (("POST", None), ("POST", 0), ("HEAD", 5)):
        transport, cycle = _Transport(), _cycle(method)
        wrapped = _OneWriteAnswer(transport, cycle)
        _start(cycle, length=length)
        wrapped.write(b"head")
        assert transport.writes == [b"head"]
        wrapped.write(b"body")
        assert transport.writes == [b"head", b"body"]


def test_later_body_writes_go_out_at_once() -> None:
    transport, cycle = _Transport(), _cycle()
    wrapped = _OneWriteAnswer(transport, cycle)
    _start(cycle, length=4)
    wrapped.write(b"head")
    wrapped.write(b"ab")
    wrapped.write(b"cd")
    assert transport.writes == [b"headab", b"cd"]
