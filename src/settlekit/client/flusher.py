"""Sends a spool's events to the API, stream by stream in spool order, in batches (`Spool.next_batch`).

A batch that the API answers (committed now, replayed under its Idempotency-Key, or found already there) is
marked sent; a transient failure (no answer, 429, 5xx) stops the pass and leaves everything pending; a refusal of
the batch blocks its stream with the API's error and the pass goes on with the other streams. An authentication
or permission failure stops the pass without blocking anything (the key is at fault, not the events).
`Flusher.start` runs passes in a background thread until `stop`."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from settlekit import failpoints
from settlekit.client.errors import ApiError, ApiUnreachableError
from settlekit.client.http import Client, Prepared
from settlekit.client.retry import RetryPolicy, is_transient
from settlekit.client.spool import DEFAULT_BATCH_EVENTS, Batch, Spool
from settlekit.errors import SettlekitError

log = logging.getLogger("settlekit.client.spool")
# answers about the key itself, not about one stream's events: every stream would get them, so the pass stops
_KEY_REFUSALS = frozenset({"UNAUTHENTICATED", "API_KEY_INVALID", "FORBIDDEN", "RATE_LIMITED"})


@dataclass
class FlushReport:
    """One pass: events sent per stream, streams blocked by it (code), and the error that stopped it, if any."""

    sent: dict[str, int] = field(default_factory=dict)
    blocked: dict[str, ApiError] = field(default_factory=dict)
    error: SettlekitError | None = None

    @property
    def total_sent(self) -> int:
        return sum(self.sent.values())


def append_request(batch: Batch) -> Prepared:
    """The append of a batch: its events as spooled, its stored Idempotency-Key, the head it expects."""
    headers = {"content-type": "application/json", "idempotency-key": batch.idempotency_key,
               "x-expected-prev-chain-hash": batch.prev_chain_hash or "null"}
    return Prepared("POST", f"/v1/jobs/{batch.stream_id}/events", {}, batch.body(), headers)


class Flusher:
    """Sends `spool` through `client`. `retry` is per request (a pass gives up on a stream's batch after it and
    leaves the batch for the next pass)."""

    def __init__(self, spool: Spool, client: Client, *, retry: RetryPolicy | None = None,
                 batch_events: int = DEFAULT_BATCH_EVENTS, idle_seconds: float = 5.0, max_backoff: float = 60.0):
        self.spool = spool
        self.client = client
        self.retry = retry or client.retry
        self.batch_events = batch_events
        self.idle_seconds = idle_seconds
        self.max_backoff = max_backoff
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_report: FlushReport | None = None
        self.last_error: BaseException | None = None
        self._locks_lock = threading.Lock()
        self._stream_locks: dict[str, threading.Lock] = {}

    def _stream_lock(self, stream_id: str) -> threading.Lock:
        """One sender per stream at a time (the executor's own send and the background pass)."""
        with self._locks_lock:
            return self._stream_locks.setdefault(stream_id, threading.Lock())

    def flush_stream(self, stream_id: str, report: FlushReport | None = None,
                     retry: RetryPolicy | None = None) -> FlushReport:
        """Send the stream's waiting events (`retry`: per request, default the flusher's). A transient failure
        or an authentication failure raises (nothing is lost: the batch stays pending with its key); a refusal
        blocks the stream and is in the report."""
        report = report if report is not None else FlushReport()
        with self._stream_lock(stream_id):
            return self._send_batches(stream_id, report, retry or self.retry)

    def _send_batches(self, stream_id: str, report: FlushReport, retry: RetryPolicy) -> FlushReport:
        while (batch := self.spool.next_batch(stream_id, self.batch_events)) is not None:
            failpoints.hit("spool.batch_stored", stream_id)
            try:
                answer = self.client.send(append_request(batch), retry)
            except ApiError as exc:
                # a 5xx says nothing about the events (the batch may even have committed): keep it pending
                if is_transient(exc) or exc.status >= 500 or exc.status == 401 or exc.code in _KEY_REFUSALS:
                    raise
                self.spool.block(stream_id, exc.code, str(exc), exc.problem)
                report.blocked[stream_id] = exc
                log.warning("spool stream %s blocked: %s", stream_id, exc)
                return report
            failpoints.hit("spool.answered", stream_id)
            positions = answer.get("positions") if isinstance(answer, dict) else None
            if not isinstance(positions, list) or len(positions) != len(batch.seqs):
                # not the API's append answer (a proxy's page): nothing is known to be stored, the batch stays
                raise ApiUnreachableError("the answer to an append is not the API's (no positions of the batch's"
                                          " events)")
            self.spool.mark_sent(batch, positions)
            failpoints.hit("spool.marked", stream_id)
            report.sent[stream_id] = report.sent.get(stream_id, 0) + len(batch.seqs)
        return report

    def flush(self) -> FlushReport:
        """One pass over every stream with waiting events (oldest first). Stops at the first transient or
        authentication failure, which is in `error`."""
        report = FlushReport()
        for stream_id in self.spool.streams_to_send():
            try:
                self.flush_stream(stream_id, report)
            except SettlekitError as exc:
                report.error = exc
                break
        self.last_report = report
        return report

    # --- the background thread

    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="settlekit-spool-flusher", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Run a pass now (new events were spooled)."""
        self._wake.set()

    def stop(self, timeout: float = 30.0) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # the thread ends; a later start() begins again from the spool file
            self.last_error = exc
            log.error("spool flusher stopped: %r", exc)

    def _loop(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                report = self.flush()
            except Exception as exc:  # a bug or a broken spool file: logged, retried after a pause
                log.exception("spool flush pass failed")
                report = FlushReport(error=SettlekitError(str(exc)))
            failures = failures + 1 if report.error is not None else 0
            wait = min(self.max_backoff, self.retry.base_delay * 2 ** failures) if failures else self.idle_seconds
            self._wake.wait(wait)
