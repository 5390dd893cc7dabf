"""The append use case: between the entry points (API, CLI, importer, demo) and the store.

`Appender.append` validates the input (envelope, size, time and signer policy), completes server drafts, runs the
stream's domain step (`jobs.py` for settlekit's streams), orchestrates idempotency and hands one `CommitBatch` to
the store's event recorder. `job_appender(db)` is the one the entry points use.
"""

from settlekit.append.appender import DEFAULT_MAX_PAYLOAD_BYTES, Appender
from settlekit.append.domain import DomainOutcome, PassThroughDomain, StreamDomain
from settlekit.append.idempotency import Idempotency
from settlekit.append.jobs import JobStreamDomain, job_appender
from settlekit.append.policy import FUTURE_TOLERANCE, HISTORY, LIVE, AppendPolicy
from settlekit.append.result import AppendResult

__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "FUTURE_TOLERANCE",
    "HISTORY",
    "LIVE",
    "AppendPolicy",
    "AppendResult",
    "Appender",
    "DomainOutcome",
    "Idempotency",
    "JobStreamDomain",
    "PassThroughDomain",
    "StreamDomain",
    "job_appender",
]
