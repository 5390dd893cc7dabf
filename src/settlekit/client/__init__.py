"""The settlekit client SDK: `Client`/`AsyncClient` for every API route, typed errors, and (in `executor` and
`spool`) the signing executor of robots and operators with its offline spool. It never imports the server side
(store, api, append, dispatch, delivery); the import-linter contract `client-not-server` says so."""

from settlekit.client.errors import (
    ApiConflictError,
    ApiError,
    ApiNotFoundError,
    ApiUnavailableError,
    ApiUnreachableError,
    ApiValidationError,
    SpoolError,
)
from settlekit.client.http import AsyncClient, Client
from settlekit.client.retry import NO_RETRY, RetryPolicy, is_transient

__all__ = [
    "NO_RETRY", "ApiConflictError", "ApiError", "ApiNotFoundError", "ApiUnavailableError", "ApiUnreachableError",
    "ApiValidationError", "AsyncClient", "Client", "RetryPolicy", "SpoolError", "is_transient",
]
