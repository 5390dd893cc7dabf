"""Every API route as one method, written once for the sync and the async client.

A method names its route as `"METHOD /path/{param}"` and hands `_call` the path parameters, the query parameters
(under their API names; None is left out), and `body` when the route takes one. `Client._call` sends it and
returns the decoded answer; `AsyncClient._call` returns an awaitable of it. A route answering Server-Sent Events
goes through `_stream` instead: an iterator of `ServerSentEvent`s (an async one for `AsyncClient`). Adding a
route is one method here; tests/api/test_client_openapi.py checks every method against the OpenAPI document,
and that no route is missing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Generic, Literal, TypeVar

R = TypeVar("R")
S = TypeVar("S")
Json = Any
UNSET: Any = object()  # a keyword not given (distinct from None, which some routes take as a value)


def fields(**values: Any) -> dict[str, Any]:
    """A request body of the keywords that were given (UNSET and None dropped)."""
    return {k: v for k, v in values.items() if v is not UNSET and v is not None}


class Operations(Generic[R, S]):
    """The routes of the API. `R` is what a call returns: the decoded JSON (or text) for `Client`, an awaitable
    of it for `AsyncClient`; `S` what a stream of Server-Sent Events is. Writes send an Idempotency-Key
    (generated unless `idempotency_key` is given)."""

    def _call(self, route: str, /, *, body: Any = UNSET, headers: Mapping[str, str] | None = None,
              idempotency_key: str | None = None, **params: Any) -> R:
        raise NotImplementedError

    def _stream(self, route: str, /, *, headers: Mapping[str, str] | None = None, **params: Any) -> S:
        raise NotImplementedError

    # --- jobs

    def create_job(self, payload: Mapping[str, Any], *, job_id: str | None = None,
                   actor: Mapping[str, str] | None = None, idempotency_key: str | None = None) -> R:
        """Create a job (JOB_CREATED as a server draft); 409 JOB_ALREADY_EXISTS when the id is taken."""
        return self._call("POST /v1/jobs", body=fields(jobId=job_id, actor=actor, payload=payload),
                          idempotency_key=idempotency_key)

    def append_events(self, job_id: str, events: Sequence[Mapping[str, Any]] | Mapping[str, Any], *,
                      expected_prev_chain_hash: str | None = UNSET, idempotency_key: str | None = None) -> R:
        """Append server drafts or client-finalized envelopes (one or a list, chained in order). Drafts need
        `expected_prev_chain_hash` (None: the stream must be empty); finalized events carry their own link, and
        an expected head given with them must be the stream's head too."""
        headers = {} if expected_prev_chain_hash is UNSET else {
            "x-expected-prev-chain-hash": "null" if expected_prev_chain_hash is None else expected_prev_chain_hash}
        return self._call("POST /v1/jobs/{job_id}/events", job_id=job_id, body=events, headers=headers,
                          idempotency_key=idempotency_key)

    def list_jobs(self, *, status: str | None = None, limit: int | None = None, cursor: str | None = None) -> R:
        """The tenant's jobs, a page at a time (`nextCursor` → `cursor`)."""
        return self._call("GET /v1/jobs", status=status, limit=limit, cursor=cursor)

    def get_job(self, job_id: str) -> R:
        """A job's snapshot with its version and headChainHash."""
        return self._call("GET /v1/jobs/{job_id}", job_id=job_id)

    def get_events(self, job_id: str, *, through_chain_hash: str | None = None, after_seq: int | None = None) -> R:
        """A job's events (after a seq, or up to a chain hash)."""
        return self._call("GET /v1/jobs/{job_id}/events", job_id=job_id, throughChainHash=through_chain_hash,
                          afterSeq=after_seq)

    def export_job(self, job_id: str, *, through_chain_hash: str | None = None) -> R:
        """A job's stream as the offline verifier reads it (a JSON array)."""
        return self._call("GET /v1/jobs/{job_id}/export", job_id=job_id, throughChainHash=through_chain_hash)

    # --- ledger and artifacts

    def ledger_balances(self, *, as_of: str | None = None, position: str | None = None,
                        party: str | None = None) -> R:
        """Balances per account: now, or as of an instant (ISO-8601 with offset) or an event's position cursor
        (from the event feed or an append's `positions`); a party's."""
        return self._call("GET /v1/ledger/balances", asOf=as_of, position=position, party=party)

    def account_postings(self, account_id: str, *, party: str | None = None, limit: int | None = None,
                         cursor: str | None = None) -> R:
        """An account's postings in ledger order, one keyset page ({postings, nextCursor})."""
        return self._call("GET /v1/ledger/accounts/{account_id}/postings", account_id=account_id, party=party,
                          limit=limit, cursor=cursor)

    def ledger_entries(self, job_id: str) -> R:
        """A job's journal entries."""
        return self._call("GET /v1/jobs/{job_id}/ledger/entries", job_id=job_id)

    def ledger_allocations(self, job_id: str) -> R:
        """A job's party allocations."""
        return self._call("GET /v1/jobs/{job_id}/ledger/allocations", job_id=job_id)

    def close_month(self, month: str, *, idempotency_key: str | None = None) -> R:
        """Close a month (YYYY-MM) for the key's tenant: the signed MonthClose.v1 (a re-run gives the same)."""
        return self._call("POST /v1/finance/closes/{month}", month=month, idempotency_key=idempotency_key)

    def get_close(self, month: str) -> R:
        """The tenant's MonthClose.v1 of a month."""
        return self._call("GET /v1/finance/closes/{month}", month=month)

    def journal_csv(self, month: str) -> R:
        """The month's JournalCsv.v1 (its SHA-256 is the close's journal hash)."""
        return self._call("GET /v1/finance/closes/{month}/journal.csv", month=month)

    def gl_batch(self, month: str) -> R:
        """The month's GlBatch.v1 over the tenant's GL mapping."""
        return self._call("GET /v1/finance/closes/{month}/gl-batch", month=month)

    def inclusion_proof(self, month: str, job_id: str) -> R:
        """The inclusion proof of a job's leaf in the month's close."""
        return self._call("GET /v1/finance/closes/{month}/proofs/{job_id}", month=month, job_id=job_id)

    def consistency_proof(self, from_month: str, to_month: str) -> R:
        """The consistency proof between the tenant's logs at two closes."""
        months: dict[str, Any] = {"from": from_month, "to": to_month}  # `from` is a Python keyword
        return self._call("GET /v1/finance/consistency", **months)

    def put_gl_mapping(self, mapping: Mapping[str, Any], *, idempotency_key: str | None = None) -> R:
        """Store the tenant's GlMapping.v1."""
        return self._call("PUT /v1/finance/gl-mapping", body=mapping, idempotency_key=idempotency_key)

    def get_gl_mapping(self) -> R:
        """The tenant's GL mapping."""
        return self._call("GET /v1/finance/gl-mapping")

    def list_artifacts(self, job_id: str, *, type: str | None = None, source_event_id: str | None = None,
                       limit: int | None = None, cursor: str | None = None) -> R:
        """A job's artifacts in stream order."""
        return self._call("GET /v1/jobs/{job_id}/artifacts", job_id=job_id, type=type,
                          sourceEventId=source_event_id, limit=limit, cursor=cursor)

    def effective_artifact(self, job_id: str, type: str) -> R:
        """The effective artifact of a type for a job."""
        return self._call("GET /v1/jobs/{job_id}/artifacts/effective", job_id=job_id, type=type)

    def get_artifact(self, artifact_id: str) -> R:
        """One artifact document."""
        return self._call("GET /v1/artifacts/{artifact_id}", artifact_id=artifact_id)

    # --- webhook destinations and deliveries

    def create_destination(self, destination_id: str, url: str, *, secret: str | None = None,
                           secret_ref: str | None = None,
                           signing: Literal["standard", "settld_legacy", "both"] | None = None,
                           artifact_types: Sequence[str] | None = None,
                           ordering: Literal["best_effort", "strict_scope"] | None = None,
                           allow_private_network: bool | None = None, idempotency_key: str | None = None) -> R:
        """Create a webhook destination (give `secret` or `secretRef`)."""
        body = fields(destinationId=destination_id, url=url, secret=secret, secretRef=secret_ref, signing=signing,
                      artifactTypes=artifact_types, ordering=ordering, allowPrivateNetwork=allow_private_network)
        return self._call("POST /v1/destinations", body=body, idempotency_key=idempotency_key)

    def list_destinations(self) -> R:
        return self._call("GET /v1/destinations")

    def get_destination(self, destination_id: str) -> R:
        return self._call("GET /v1/destinations/{destination_id}", destination_id=destination_id)

    def update_destination(self, destination_id: str, *, url: str | None = None, secret: str | None = None,
                           secret_ref: str | None = None, secret_grace_seconds: int | None = None,
                           signing: Literal["standard", "settld_legacy", "both"] | None = None,
                           artifact_types: Sequence[str] | None = None,
                           ordering: Literal["best_effort", "strict_scope"] | None = None,
                           allow_private_network: bool | None = None, idempotency_key: str | None = None) -> R:
        """Update a destination (omitted fields are kept; a new secret is a rotation with a grace period)."""
        body = fields(url=url, secret=secret, secretRef=secret_ref, secretGraceSeconds=secret_grace_seconds,
                      signing=signing, artifactTypes=artifact_types, ordering=ordering,
                      allowPrivateNetwork=allow_private_network)
        return self._call("PATCH /v1/destinations/{destination_id}", destination_id=destination_id, body=body,
                          idempotency_key=idempotency_key)

    def disable_destination(self, destination_id: str, *, reason: str | None = None,
                            idempotency_key: str | None = None) -> R:
        return self._call("POST /v1/destinations/{destination_id}/disable", destination_id=destination_id,
                          body=fields(reason=reason), idempotency_key=idempotency_key)

    def enable_destination(self, destination_id: str, *, backfill: bool | None = None,
                           idempotency_key: str | None = None) -> R:
        """Re-enable a destination; `backfill=True` creates the deliveries it missed while disabled."""
        return self._call("POST /v1/destinations/{destination_id}/enable", destination_id=destination_id,
                          body=fields(backfill=backfill), idempotency_key=idempotency_key)

    def replay_destination(self, destination_id: str, since: str, *, until: str | None = None,
                           idempotency_key: str | None = None) -> R:
        """Start a replay: the destination's delivered and failed deliveries of [since, until) are sent again (same
        webhook-id), the first at once, the rest at the server's replay rate (202, the replay)."""
        return self._call("POST /v1/destinations/{destination_id}/replay", destination_id=destination_id,
                          body=fields(since=since, until=until), idempotency_key=idempotency_key)

    def list_replays(self, destination_id: str) -> R:
        """The destination's latest replays, newest first."""
        return self._call("GET /v1/destinations/{destination_id}/replays", destination_id=destination_id)

    def get_replay(self, destination_id: str, replay_id: str) -> R:
        """One replay and its progress."""
        return self._call("GET /v1/destinations/{destination_id}/replays/{replay_id}", destination_id=destination_id,
                          replay_id=replay_id)

    def cancel_replay(self, destination_id: str, replay_id: str, *, idempotency_key: str | None = None) -> R:
        """Stop a running replay (what it requeued stays queued)."""
        return self._call("POST /v1/destinations/{destination_id}/replays/{replay_id}/cancel",
                          destination_id=destination_id, replay_id=replay_id, idempotency_key=idempotency_key)

    def test_destination(self, destination_id: str) -> R:
        """Send the destination one signed test message now; the answer says how it went."""
        return self._call("POST /v1/destinations/{destination_id}/test", destination_id=destination_id)

    def destination_stats(self, destination_id: str, *, since: str | None = None, until: str | None = None) -> R:
        """The destination's endpoint statistics over [since, until) (default: the last 24 hours)."""
        return self._call("GET /v1/destinations/{destination_id}/stats", destination_id=destination_id,
                          since=since, until=until)

    def list_feed_events(self, *, after: str | None = None, types: Sequence[str] | None = None,
                         limit: int | None = None) -> R:
        """The tenant's events past a position cursor (`next` of the previous page; none: from the first),
        commit-safe ({events: [{position, event}], next}); cursors are opaque strings."""
        return self._call("GET /v1/events", after=after, types=",".join(types) if types else None, limit=limit)

    def stream_feed_events(self, *, after: str | None = None, types: Sequence[str] | None = None,
                           limit: int | None = None, last_event_id: str | None = None) -> S:
        """The tenant's events as Server-Sent Events (id = the position cursor); resume with `last_event_id`."""
        headers = {"Last-Event-ID": last_event_id} if last_event_id is not None else None
        return self._stream("GET /v1/events/stream", headers=headers, after=after,
                            types=",".join(types) if types else None, limit=limit)

    def requeue_destination(self, destination_id: str, *, idempotency_key: str | None = None) -> R:
        """Requeue a destination's failed deliveries."""
        return self._call("POST /v1/destinations/{destination_id}/requeue", destination_id=destination_id,
                          idempotency_key=idempotency_key)

    def list_deliveries(self, *, state: Literal["pending", "delivered", "failed"] | None = None,
                        destination_id: str | None = None, limit: int | None = None,
                        after_id: str | None = None) -> R:
        """A page of the tenant's deliveries ({deliveries, nextAfterId}); ids are opaque strings."""
        return self._call("GET /v1/deliveries", state=state, destinationId=destination_id, limit=limit,
                          afterId=after_id)

    def get_delivery(self, delivery_id: str) -> R:
        """One delivery with its attempt log."""
        return self._call("GET /v1/deliveries/{delivery_id}", delivery_id=delivery_id)

    def backfill_deliveries(self, since: str, *, destination_id: str | None = None,
                            idempotency_key: str | None = None) -> R:
        """Create the deliveries missing since `since` (an ISO-8601 instant) and requeue the gone ones."""
        return self._call("POST /v1/deliveries/requeue", body=fields(since=since, destinationId=destination_id),
                          idempotency_key=idempotency_key)

    def requeue_delivery(self, delivery_id: str, *, idempotency_key: str | None = None) -> R:
        return self._call("POST /v1/deliveries/{delivery_id}/requeue", delivery_id=delivery_id,
                          idempotency_key=idempotency_key)

    # --- contract documents

    def register_contract(self, document: Mapping[str, Any], *, idempotency_key: str | None = None) -> R:
        """Register a ContractDocument.v1 for the tenant; the answer carries its `contractHash` (what jobs pin)."""
        return self._call("POST /v1/contracts", body=dict(document), idempotency_key=idempotency_key)

    def get_contract(self, contract_hash: str) -> R:
        return self._call("GET /v1/contracts/{contract_hash}", contract_hash=contract_hash)

    # --- signer keys

    def register_key(self, public_key_pem: str, purpose: Literal["robot", "operator", "server"], *,
                     entity_id: str | None = None, idempotency_key: str | None = None) -> R:
        """Register a signer public key (robot and operator keys name their `entity_id`)."""
        return self._call("POST /v1/keys", body=fields(publicKeyPem=public_key_pem, purpose=purpose,
                                                       entityId=entity_id), idempotency_key=idempotency_key)

    def list_keys(self) -> R:
        return self._call("GET /v1/keys")

    def rotate_key(self, key_id: str, *, public_key_pem: str | None = None,
                   idempotency_key: str | None = None) -> R:
        """Mark a key rotated, optionally registering its successor."""
        return self._call("POST /v1/keys/{key_id}/rotate", key_id=key_id,
                          body=fields(publicKeyPem=public_key_pem), idempotency_key=idempotency_key)

    def revoke_key(self, key_id: str, *, idempotency_key: str | None = None) -> R:
        return self._call("POST /v1/keys/{key_id}/revoke", key_id=key_id, idempotency_key=idempotency_key)

    # --- dispatcher consumers (an admin key of the operator tenant)

    def list_consumers(self) -> R:
        return self._call("GET /v1/ops/consumers")

    def consumer_status(self, name: str, *, instance_id: str | None = None) -> R:
        return self._call("GET /v1/ops/consumers/{name}", name=name, instanceId=instance_id)

    def restart_consumer(self, name: str, *, instance_id: str | None = None,
                         idempotency_key: str | None = None) -> R:
        return self._call("POST /v1/ops/consumers/{name}/restart", name=name, instanceId=instance_id,
                          idempotency_key=idempotency_key)

    def disable_consumer(self, name: str, *, instance_id: str | None = None,
                         idempotency_key: str | None = None) -> R:
        return self._call("POST /v1/ops/consumers/{name}/disable", name=name, instanceId=instance_id,
                          idempotency_key=idempotency_key)

    def enable_consumer(self, name: str, *, instance_id: str | None = None,
                        idempotency_key: str | None = None) -> R:
        return self._call("POST /v1/ops/consumers/{name}/enable", name=name, instanceId=instance_id,
                          idempotency_key=idempotency_key)

    def skip_consumer(self, name: str, *, instance_id: str | None = None, idempotency_key: str | None = None) -> R:
        """Skip (dead-letter) the event blocking a consumer."""
        return self._call("POST /v1/ops/consumers/{name}/skip", name=name, instanceId=instance_id,
                          idempotency_key=idempotency_key)

    def reset_consumer(self, name: str, to: int | Literal["now"], *, instance_id: str | None = None,
                       idempotency_key: str | None = None) -> R:
        """Move a consumer's cursor (0 replays everything, "now" skips to the end)."""
        return self._call("POST /v1/ops/consumers/{name}/reset", name=name, instanceId=instance_id,
                          body={"to": to}, idempotency_key=idempotency_key)

    def dead_letters(self, name: str, *, instance_id: str | None = None) -> R:
        return self._call("GET /v1/ops/consumers/{name}/dead-letters", name=name, instanceId=instance_id)

    # --- health

    def healthz(self) -> R:
        return self._call("GET /healthz")

    def readyz(self) -> R:
        """Readiness; raises ApiUnavailableError (503) when the database is unreachable or behind."""
        return self._call("GET /readyz")

    def metrics(self) -> R:
        """The Prometheus metrics text (an ops key of the operator tenant)."""
        return self._call("GET /metrics")
