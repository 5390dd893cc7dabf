"""The answers of settld's job routes (api.settld_compat) as pydantic models, in settld 0.1.0's shapes and key
order, rendered by `TypedRoute` like the rest of the API. Stored JSON (the job's snapshot, event envelopes) is
carried `Verbatim`: answered exactly as the append made it or the store read it. The compat routes are outside the
OpenAPI document, so these models only fix the answers' members."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict

from settlekit.api.schemas import Event, JobState, StoredEvents, Verbatim

StoredEvent = Annotated[dict[str, Any], Verbatim(Event)]


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SettldJob(_Closed):
    """`GET /jobs/{id}` and `POST /jobs` (201): the job's snapshot (null when the append answers no state)."""

    job: JobState | None


class SettldEvents(_Closed):
    """`GET /jobs/{id}/events`: the stream's envelopes as stored."""

    events: StoredEvents


class SettldAppended(_Closed):
    """`POST /jobs/{id}/events`: the event (201 appended, 200 when the same signed event was already stored), the
    job's snapshot after it, and the journal entries it posted (`ledgerEntryId`: the first, null when none)."""

    event: StoredEvent
    job: JobState | None
    ledgerEntryId: str | None
    ledgerEntryIds: list[str]
