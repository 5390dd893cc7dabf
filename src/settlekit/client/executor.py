"""The executor: a robot's or operator's signing identity on the API.

It builds each event as the envelope says (id, time, payloadHash, the chain link to the stream's head, the
Ed25519 signature; `settlekit.events`), spools it (fsync'd) and sends it. Online, `append` returns once the API
holds the event; while the API cannot be reached the event waits in the spool and a background flusher
(`start`) sends it, in order, when the API is back. A refusal (someone else appended to the stream, or a rule
refused the event) is raised and stops that stream in the spool until `discard`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from settlekit.client.errors import ApiNotFoundError, SpoolError
from settlekit.client.flusher import Flusher, FlushReport
from settlekit.client.http import Client, prepare
from settlekit.client.operations import UNSET
from settlekit.client.retry import NO_RETRY, RetryPolicy, is_transient
from settlekit.client.spool import Spool
from settlekit.errors import SettlekitError
from settlekit.events.canonical import check_json_strings, require_well_formed
from settlekit.events.envelope import Event, Signer, finalize, make_draft, now_iso

# `append` tries the API briefly and otherwise leaves the event to the background flusher (`start`), so a robot
# is not held up by an outage: two attempts, the second after at most 0.2 s (or the API's Retry-After, capped).
SEND_RETRY = RetryPolicy(attempts=2, base_delay=0.2, max_retry_after=2.0)


@dataclass(frozen=True)
class Receipt:
    """What became of an appended event: `sent` (the API holds it) or `spooled` (it waits in the spool; `error`
    says why it was not sent now)."""

    event: Event
    state: Literal["sent", "spooled"]
    error: SettlekitError | None = None

    @property
    def chain_hash(self) -> str:
        return str(self.event["chainHash"])


class Executor:
    """Signs and sends the events of one actor (`actor_type` "robot" or "operator", `actor_id`) with `signer`.
    `spool`: a Spool or the path of its file (":memory:" keeps it in memory: nothing survives a crash)."""

    def __init__(self, client: Client, signer: Signer, *, actor_type: str, actor_id: str,
                 spool: Spool | str = ":memory:", flusher: Flusher | None = None,
                 retry: RetryPolicy | None = None, send_retry: RetryPolicy = SEND_RETRY):
        self.client = client
        self.signer = signer
        self.actor = {"type": actor_type, "id": actor_id}
        self.spool = spool if isinstance(spool, Spool) else Spool(spool)
        self.flusher = flusher or Flusher(self.spool, client, retry=retry)
        self.send_retry = send_retry

    def register_key(self) -> Any:
        """Register the signer's public key for the actor (needs an admin key; a repeat is harmless)."""
        return self.client.register_key(self.signer.public_key_pem, _purpose(self.actor["type"]),
                                        entity_id=self.actor["id"], idempotency_key=f"register_{self.signer.key_id}")

    def append(self, job_id: str, event_type: str, payload: Any, *, at: str | None = None,
               wait: bool = True) -> Receipt:
        """Sign `event_type` with `payload` as the next event of job `job_id`, spool it and (with `wait`) send
        the stream's waiting events now. Raises the API's error when it refuses the stream's next batch (the
        stream is then blocked in the spool); returns `spooled` when the API cannot be reached."""
        return self.append_many(job_id, [(event_type, payload, at)], wait=wait)[0]

    def append_many(self, job_id: str, events: Sequence[tuple[str, Any, str | None]], *,
                    wait: bool = True) -> list[Receipt]:
        """`append` for several events of one job, given as (type, payload, at or None): spooled together (one
        sync to disk) and sent together."""
        if not events:
            return []
        for _, payload, _ in events:  # what the API always refuses would block the stream once spooled
            require_well_formed(payload, "$.payload", hashed_keys=True)
            check_json_strings(payload, "$.payload")  # U+0000 too, as the API checks a body
        spooled = self._spool(job_id, events)
        if not wait:
            self.flusher.wake()
            return [Receipt(e, "spooled") for e in spooled]
        return self._send(job_id, spooled)

    def _spool(self, job_id: str, events: Sequence[tuple[str, Any, str | None]]) -> list[Event]:
        known = self.spool.head(job_id)
        if known.blocked_code is not None:
            raise SpoolError(f"stream {job_id} is blocked by {known.blocked_code}", code="SPOOL_STREAM_BLOCKED",
                             status=409, streamId=job_id, blockedCode=known.blocked_code)
        server_head, fresh = None, False
        if known.pending == 0:
            server_head, fresh = self._server_head(job_id, events[0][0], known.known)

        def builder(event_type: str, payload: Any, at: str | None) -> Callable[[str | None], Event]:
            def build(prev: str | None) -> Event:
                draft = make_draft(stream_id=job_id, type=event_type, actor=self.actor, payload=payload,
                                   at=at or now_iso())
                return finalize(draft, prev, self.signer)

            return build

        return self.spool.add_many(job_id, [builder(*e) for e in events], server_head=server_head,
                                   use_server_head=fresh, seen_head=known)

    def _server_head(self, job_id: str, event_type: str, known: bool) -> tuple[str | None, bool]:
        """The job's head as the API reports it now, (None, True) for no job yet; (None, False) when the API
        cannot be reached and the spool knows the stream (its last head is used). SPOOL_HEAD_UNKNOWN when it
        can be reached neither for a stream the spool never saw (except to create the job)."""
        try:
            job = self.client.send(prepare("GET /v1/jobs/{job_id}", UNSET, None, None, {"job_id": job_id}), NO_RETRY)
            return job["headChainHash"], True
        except ApiNotFoundError:
            return None, True
        except SettlekitError as exc:
            if not is_transient(exc):
                raise
            error = exc
        if not known and event_type != "JOB_CREATED":
            raise SpoolError(f"the API is unreachable ({error.code}) and the spool has never seen job {job_id}: "
                             "follow() it with the head you know", code="SPOOL_HEAD_UNKNOWN", status=503,
                             streamId=job_id)
        return None, False

    def _send(self, job_id: str, events: list[Event]) -> list[Receipt]:
        report = FlushReport()
        try:
            self.flusher.flush_stream(job_id, report, self.send_retry)
        except SettlekitError as exc:
            if not is_transient(exc):
                raise
            self.flusher.wake()
            return [Receipt(e, "spooled", exc) for e in events]
        if job_id in report.blocked:
            raise report.blocked[job_id]
        known = self.spool.head(job_id)
        if known.blocked_code is not None:  # blocked by a background pass in between: these were never sent
            raise SpoolError(f"stream {job_id} is blocked by {known.blocked_code}", code="SPOOL_STREAM_BLOCKED",
                             status=409, streamId=job_id, blockedCode=known.blocked_code)
        if known.pending:  # still waiting (say, a batch another thread holds): not known to be sent
            self.flusher.wake()
            return [Receipt(e, "spooled") for e in events]
        return [Receipt(e, "sent") for e in events]

    def follow(self, job_id: str, head_chain_hash: str | None) -> None:
        """Tell the spool the job's head (from a dispatch message, say) so events can be spooled offline."""
        self.spool.follow(job_id, head_chain_hash)

    def discard(self, job_id: str) -> int:
        """Drop the waiting events of a blocked stream (kept in the spool file as discarded) and follow the
        API's head again. Returns how many were dropped."""
        return discard_blocked(self.client, self.spool, job_id)

    def flush(self) -> FlushReport:
        """Send every stream's waiting events now (one pass)."""
        return self.flusher.flush()

    def start(self) -> None:
        """Send waiting events in the background until `stop`."""
        self.flusher.start()

    def stop(self) -> None:
        self.flusher.stop()

    def close(self) -> None:
        self.stop()
        self.spool.close()

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _purpose(actor_type: str) -> Literal["robot", "operator", "server"]:
    if actor_type == "robot":
        return "robot"
    if actor_type == "operator":
        return "operator"
    return "server"


def discard_blocked(client: Client, spool: Spool, job_id: str) -> int:
    """`Executor.discard` for a spool on its own (the CLI): the job's head is read from the API first."""
    try:
        head = client.get_job(job_id)["headChainHash"]
    except ApiNotFoundError:
        head = None
    return spool.discard(job_id, head)

