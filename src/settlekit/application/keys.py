"""API keys: issue (only the secret's hash is stored), revoke, list and find a key."""

from __future__ import annotations

from settlekit.store.api_keys import StoredApiKey, find, insert, list_keys, revoke

__all__ = ["StoredApiKey", "find", "insert", "list_keys", "revoke"]
