"""Payload checks for the job execution liveness events, as settld's `core/liveness.js` validates them."""

from __future__ import annotations

from typing import Any, Final

from settlekit.jobs.api_payloads._js import (
    field,
    is_finite_number,
    is_nullish,
    is_number,
    is_safe_integer,
    iso_date,
    non_empty_string,
    nullable_non_empty_string,
    object_with_fields,
    one_of,
    optional_boolean,
    reject,
    safe_int,
)

EXECUTION_STAGES: Final = frozenset({"ARRIVED", "ACCESS", "TASK", "EXIT"})
STALL_REASONS: Final = frozenset({"NO_HEARTBEAT", "ROBOT_ERROR", "OPERATOR_QUEUE_TIMEOUT"})

_STARTED_FIELDS: Final = frozenset({"jobId", "robotId", "startedAt", "stage"})
_HEARTBEAT_FIELDS: Final = frozenset({"jobId", "robotId", "t", "stage", "progress", "assistRequested"})
_STALLED_FIELDS: Final = frozenset({"jobId", "robotId", "detectedAt", "reason", "lastHeartbeatAt", "policy"})
_STALL_POLICY_FIELDS: Final = frozenset({"heartbeatIntervalMs", "stallAfterMs"})
_RESUMED_FIELDS: Final = frozenset({"jobId", "robotId", "resumedAt"})
_ABORTED_FIELDS: Final = frozenset({"jobId", "robotId", "abortedAt", "reason"})
_COMPLETED_FIELDS: Final = frozenset({"jobId", "robotId", "completedAt"})


def _stage(value: Any, name: str) -> None:
    one_of(value, EXECUTION_STAGES, name, "is not a supported execution stage")


def _job_and_robot(payload: dict[str, Any]) -> None:
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    non_empty_string(field(payload, "robotId"), "payload.robotId")


def validate_job_execution_started(payload: Any) -> None:
    object_with_fields(payload, _STARTED_FIELDS, "payload")
    _job_and_robot(payload)
    iso_date(field(payload, "startedAt"), "payload.startedAt")
    stage = field(payload, "stage")
    if not is_nullish(stage):
        _stage(stage, "payload.stage")


def validate_job_heartbeat(payload: Any) -> None:
    object_with_fields(payload, _HEARTBEAT_FIELDS, "payload")
    _job_and_robot(payload)
    iso_date(field(payload, "t"), "payload.t")
    _stage(field(payload, "stage"), "payload.stage")

    # progress is either a whole step count (>= 0) or a fraction in 0..1
    progress = field(payload, "progress")
    if not is_nullish(progress):
        if is_safe_integer(progress):
            if progress < 0:
                reject("payload.progress must be >= 0")
        elif is_number(progress) and is_finite_number(progress):
            if progress < 0 or progress > 1:
                reject("payload.progress must be within 0..1")
        else:
            reject("payload.progress must be a safe integer step or a finite number within 0..1")

    optional_boolean(field(payload, "assistRequested"), "payload.assistRequested")


def validate_job_execution_stalled(payload: Any) -> None:
    object_with_fields(payload, _STALLED_FIELDS, "payload")
    _job_and_robot(payload)
    iso_date(field(payload, "detectedAt"), "payload.detectedAt")
    one_of(field(payload, "reason"), STALL_REASONS, "payload.reason")
    iso_date(field(payload, "lastHeartbeatAt"), "payload.lastHeartbeatAt")

    policy = field(payload, "policy")
    object_with_fields(policy, _STALL_POLICY_FIELDS, "payload.policy")
    heartbeat_interval_ms = field(policy, "heartbeatIntervalMs")
    stall_after_ms = field(policy, "stallAfterMs")
    safe_int(heartbeat_interval_ms, "payload.policy.heartbeatIntervalMs")
    safe_int(stall_after_ms, "payload.policy.stallAfterMs")
    if heartbeat_interval_ms <= 0:
        reject("payload.policy.heartbeatIntervalMs must be > 0")
    if stall_after_ms <= 0:
        reject("payload.policy.stallAfterMs must be > 0")


def validate_job_execution_resumed(payload: Any) -> None:
    object_with_fields(payload, _RESUMED_FIELDS, "payload")
    _job_and_robot(payload)
    iso_date(field(payload, "resumedAt"), "payload.resumedAt")


def validate_job_execution_aborted(payload: Any) -> None:
    object_with_fields(payload, _ABORTED_FIELDS, "payload")
    _job_and_robot(payload)
    iso_date(field(payload, "abortedAt"), "payload.abortedAt")
    nullable_non_empty_string(field(payload, "reason"), "payload.reason")


def validate_job_execution_completed(payload: Any) -> None:
    object_with_fields(payload, _COMPLETED_FIELDS, "payload")
    _job_and_robot(payload)
    iso_date(field(payload, "completedAt"), "payload.completedAt")
