"""Errors raised by the job domain."""

from __future__ import annotations

from typing import Any

from settlekit.errors import SettlekitError, ValidationError


class InvalidJobTransition(SettlekitError):
    """`(from_status, event_type)` is not in the transition table (02-jobs.md §2, §4)."""

    code = "INVALID_TRANSITION"  # the code; spec 02 §4 calls it TRANSITION_ILLEGAL
    status = 409

    def __init__(self, from_status: str | None, event_type: str, job_id: str | None = None):
        super().__init__(
            f"event {event_type} is not allowed in status {from_status}",
            fromStatus=from_status,
            eventType=event_type,
            jobId=job_id,
        )
        self.from_status = from_status
        self.event_type = event_type


class PayloadInvalid(ValidationError):
    """A payload field is missing or has the wrong type (400 SCHEMA_INVALID); the message names the field as
    settld's validators do (`payload.robotId must be a non-empty string`), `details.eventType` the type."""

    def __init__(self, event_type: str, field: str, why: str, **details: Any):
        super().__init__(f"payload.{field} {why}", field=field, eventType=event_type, **details)


class DomainRuleViolation(SettlekitError):
    """A domain precondition failed (409 with a specific code)."""

    status = 409

    def __init__(self, message: str, *, code: str, status: int = 409, **details: Any):
        super().__init__(message, code=code, status=status, **details)
