"""`FaultyReceiver`: the reference receiver with queued faults (an error status, a delay, both) that the next
requests meet before normal processing, through the `receiver.request` failpoint."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from settlekit.delivery.receiver import ReceivedRequest, ReceiverServer
from settlekit.failpoints import arm


@dataclass
class Fault:
    """Applied to one incoming request: optional delay, then (if `status`) answer it instead of processing."""

    status: int | None = 500
    retry_after: str | None = None
    delay: float = 0.0
    body: bytes = b""


class FaultyReceiver(ReceiverServer):
    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self._faults: deque[Fault] = deque()
        self._faults_lock = threading.Lock()

    def inject(
        self,
        status: int | None = 500,
        *,
        count: int = 1,
        retry_after: str | int | None = None,
        delay: float = 0.0,
        body: bytes = b"",
    ) -> None:
        """Queue `count` faults; each of the next requests consumes one (FIFO) before normal processing.

        `status=None` with `delay` only slows the request down and then processes it normally.
        """
        ra = str(retry_after) if retry_after is not None else None
        with self._faults_lock:
            for _ in range(count):
                self._faults.append(Fault(status=status, retry_after=ra, delay=delay, body=body))
        arm("receiver.request", _apply_fault)

    def clear_faults(self) -> None:
        with self._faults_lock:
            self._faults.clear()

    def faults_left(self) -> int:
        """Faults queued that no request has met yet."""
        with self._faults_lock:
            return len(self._faults)

    def next_fault(self) -> Fault | None:
        with self._faults_lock:
            return self._faults.popleft() if self._faults else None


def _apply_fault(handler: Any, headers: Mapping[str, str], body: bytes) -> bool:
    """The `receiver.request` hook: True when the request was answered (or dropped) here."""
    owner = handler.server.owner
    fault = owner.next_fault() if isinstance(owner, FaultyReceiver) else None
    if fault is None:
        return False
    if fault.delay > 0 and owner._stopping.wait(fault.delay):
        handler.close_connection = True
        return True
    if fault.status is None:
        return False
    extra = {"retry-after": fault.retry_after} if fault.retry_after is not None else None
    owner._log_request(ReceivedRequest(handler.path, dict(headers), body, fault.status, "fault"))
    handler._send_bytes(fault.status, fault.body, "text/plain", extra)
    return True
