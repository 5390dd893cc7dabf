"""The streams this process appended to last: each one's head, stored state and signer keys as of its last commit
here, so that the next append to it needs no read before its checks.

An entry is put only after a commit, from what that commit wrote (the state object the domain step made, which
the store holds as its JSON: reading it back gives an equal object, and the domain step never changes the state it
is given; tests/unit/test_stream_state_cache.py shows both on the reference corpora). Another process may have
appended since, so an entry is a guess checked by the commit (the head it links to must still be the head), and
an append served from it that fails in any way is done again from a fresh read (`CachedStreamStale`). A newer
head never gives way to an older one. The signer keys are rows that never change once registered.

Memory is bounded by the number of entries and by the size of their states as stored (the JSON text: a tenant's
large states cannot crowd the process's memory, only the cache). A state larger than a sixteenth of that budget is
not kept.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from settlekit.store.signer_keys import SignerKey
from settlekit.store.streams import StreamHead

DEFAULT_CACHED_STREAMS = 2048
DEFAULT_CACHED_STATE_BYTES = 64 * 1024 * 1024  # of stored state text, all entries together


@dataclass(frozen=True, slots=True)
class CachedStream:
    """A stream as this process last committed to it (tenant, stream): its head, stored state and the tenant's
    signer keys among `key_ids` (the registered ones in `keys`)."""

    tenant_id: str
    stream_id: str
    head: StreamHead
    snapshot: dict[str, Any] | None
    keys: dict[str, SignerKey]
    key_ids: frozenset[str]

    def head_and_snapshot(self) -> tuple[StreamHead, dict[str, Any] | None]:
        return self.head, self.snapshot


class CachedStreamStale(Exception):  # noqa: N818 (a signal to the caller, not an error)
    """An append served from a cached stream did not go through (the stream moved on in another process, the
    API key was revoked, or its checks refused it): nothing was written, and the entry is gone. The caller does
    the append again from a fresh read, which gives the answer."""


class StreamStateCache:
    """At most `size` streams whose stored states come to at most `max_bytes`, the least recently used dropped
    first (size 0: nothing is kept)."""

    def __init__(self, size: int = DEFAULT_CACHED_STREAMS, max_bytes: int = DEFAULT_CACHED_STATE_BYTES):
        self.size = size
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[str, str], tuple[CachedStream, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, tenant_id: str, stream_id: str, key_ids: Collection[str]) -> CachedStream | None:
        """The stream's entry when it holds every signer key id in `key_ids` (looked up when it was read)."""
        with self._lock:
            held = self._entries.get((tenant_id, stream_id))
            if held is None or not held[0].key_ids.issuperset(key_ids):
                return None
            self._entries.move_to_end((tenant_id, stream_id))
            return held[0]

    def put(self, entry: CachedStream, stored_bytes: int) -> None:
        """Keep `entry`, whose state is `stored_bytes` long as stored, unless the entry held is at a later head
        (a state too large to keep drops the stream's entry)."""
        if self.size <= 0:
            return
        ident = (entry.tenant_id, entry.stream_id)
        with self._lock:
            held = self._entries.get(ident)
            if held is not None and held[0].head.seq > entry.head.seq:
                return
            self._remove(ident)
            if stored_bytes > self.max_bytes // 16:
                return
            self._entries[ident] = (entry, stored_bytes)
            self._bytes += stored_bytes
            while len(self._entries) > self.size or self._bytes > self.max_bytes:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped

    def drop(self, tenant_id: str, stream_id: str) -> None:
        with self._lock:
            self._remove((tenant_id, stream_id))

    def _remove(self, ident: tuple[str, str]) -> None:
        held = self._entries.pop(ident, None)
        if held is not None:
            self._bytes -= held[1]

    @property
    def stored_bytes(self) -> int:
        """The size of the states held, as stored."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)
