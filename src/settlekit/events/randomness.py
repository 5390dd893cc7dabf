"""Random bytes for identifiers (event ids, batch and request ids), drawn from the operating system in blocks.

`os.urandom` is a system call that releases the GIL: on the API's event loop, two per append handed the
interpreter to another thread and waited to get it back. Reading 4 KiB at a time keeps the same source (the
kernel's CSPRNG) at one call per 256 identifiers. A forked child starts with an empty block, so it never repeats
its parent's bytes."""

from __future__ import annotations

import os
import threading
import uuid

_BLOCK = 4096


class _Pool:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._block = b""
        self._at = 0

    def take(self, n: int) -> bytes:
        with self._lock:
            if self._at + n > len(self._block):
                self._block = os.urandom(max(_BLOCK, n))
                self._at = 0
            out = self._block[self._at:self._at + n]
            self._at += n
            return out

    def forget(self) -> None:
        self._lock = threading.Lock()
        self._block = b""
        self._at = 0


_POOL = _Pool()
os.register_at_fork(after_in_child=_POOL.forget)


def random_bytes(n: int) -> bytes:
    """`n` bytes from the kernel's CSPRNG, each byte handed out once in this process."""
    return _POOL.take(n)


def random_uuid() -> uuid.UUID:
    """A version 4 UUID, as `uuid.uuid4()`, without a system call for each."""
    return uuid.UUID(bytes=_POOL.take(16), version=4)
