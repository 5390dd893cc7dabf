"""Opaque, tenant-bound tokens for what a tenant would otherwise see as a global number.

Event positions and delivery ids count every tenant's writes: handed out as they are, they tell a tenant how many
events (or deliveries) other tenants made, and when. The API shows each as a token instead: AES-SIV (RFC 5297,
deterministic authenticated encryption) of the number(s) as fixed-size bytes, with the token's kind, the tenant
and the listing it belongs to as associated data, in base64url. So:

- the same value gives the same token (SSE ids, retries and repeated pages stay stable);
- a token tells nothing of its value, not even its size (the plaintext has a fixed length);
- a token altered, of another kind or listing, or of another tenant does not decrypt: CURSOR_INVALID;
- a number where a token is expected (an old cursor) is CURSOR_NUMERIC, never read as a position.

The key is derived from a random secret kept in the database (store/cursor_secret.py), so every host of a
deployment agrees and tokens survive restarts. Encoding costs a few microseconds per value.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESSIV

from settlekit.errors import ValidationError

EVENT: Final = "event"  # an event's position: the feed, SSE ids, append answers, postings, balances as of
DELIVERY: Final = "delivery"  # a delivery row's id
POSTINGS: Final = "postings"  # the key of the last posting of an account's postings page

_DOMAIN: Final = b"settlekit cursors v1"
MEMO_SIZE: Final = 16_384  # recent tokens kept per process: streams of one tenant share the same events' ids
_TOKEN: Final = re.compile(r"[A-Za-z0-9_-]{16,200}")


def _text(value: str) -> bytes:
    return value.encode("utf-8", "surrogatepass")


class Cursors:
    """Encodes and decodes tokens with the key derived from a deployment secret (bytes, or a function that reads
    it once, on first use)."""

    def __init__(self, secret: bytes | Callable[[], bytes]):
        self._source = secret
        self._siv: AESSIV | None = None
        self._lock = threading.Lock()
        self._memo: dict[tuple[str, str, int], str] = {}

    @property
    def loaded(self) -> bool:
        """Whether the secret was read already (encoding and decoding then do no I/O)."""
        return self._siv is not None

    def load(self) -> Cursors:
        """Read the secret now (off an event loop, outside a transaction: it may query the database)."""
        self._cipher()
        return self

    def _cipher(self) -> AESSIV:
        siv = self._siv
        if siv is None:
            with self._lock:
                if self._siv is None:
                    secret = self._source if isinstance(self._source, bytes) else self._source()
                    self._siv = AESSIV(hashlib.sha512(_DOMAIN + secret).digest())  # AES-256-SIV: a 64-byte key
                siv = self._siv
        return siv

    def encode(self, kind: str, tenant_id: str, *values: int, listing: Sequence[str] = ()) -> str:
        """The token of `values` (non-negative int64s) for `tenant_id`, bound to `kind` and `listing`."""
        plain = struct.pack(f">{len(values)}Q", *values)
        sealed = self._cipher().encrypt(plain, [_text(kind), _text(tenant_id), *map(_text, listing)])
        return base64.urlsafe_b64encode(sealed).rstrip(b"=").decode("ascii")

    def encode_all(self, kind: str, tenant_id: str, values: Sequence[int]) -> list[str]:
        """One token per value. The feed's hot path: the recent tokens are remembered, so the open streams of a
        tenant, which send the same events, seal each position once."""
        memo, out = self._memo, []
        data: list[bytes] | None = None
        for value in values:
            token = memo.get((kind, tenant_id, value))
            if token is None:
                if data is None:
                    data = [_text(kind), _text(tenant_id)]
                sealed = self._cipher().encrypt(value.to_bytes(8, "big"), data)
                token = base64.urlsafe_b64encode(sealed).rstrip(b"=").decode("ascii")
                if len(memo) >= MEMO_SIZE:
                    memo.clear()
                memo[(kind, tenant_id, value)] = token
            out.append(token)
        return out

    def decode(self, kind: str, tenant_id: str, token: str, *, field: str, count: int = 1,
               listing: Sequence[str] = ()) -> tuple[int, ...]:
        """The `count` values a token of `tenant_id` carries; CURSOR_NUMERIC for a number (an old cursor),
        CURSOR_INVALID for anything else that is not such a token."""
        if token.isascii() and token.isdigit():
            raise ValidationError(f"{field} must be a cursor the API returned: numeric positions and ids are no "
                                  "longer accepted", code="CURSOR_NUMERIC", field=field)
        values = self.values(kind, tenant_id, token, count=count, listing=listing)
        if values is None:
            raise ValidationError(f"{field} is not a cursor the API returned to this tenant", code="CURSOR_INVALID",
                                  field=field)
        return values

    def values(self, kind: str, tenant_id: str, token: str, *, count: int = 1,
               listing: Sequence[str] = ()) -> tuple[int, ...] | None:
        """The values of a token of `tenant_id`, or None when it is not one (malformed, altered, of another kind,
        listing or tenant)."""
        if not _TOKEN.fullmatch(token):
            return None
        try:
            sealed = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            plain = self._cipher().decrypt(sealed, [_text(kind), _text(tenant_id), *map(_text, listing)])
        except (binascii.Error, ValueError, InvalidTag):
            return None
        if len(plain) != 8 * count:
            return None
        values: tuple[int, ...] = struct.unpack(f">{count}Q", plain)
        return values if all(v < 2**63 for v in values) else None

    def event(self, tenant_id: str, position: int) -> str:
        """The token of an event position."""
        return self.encode(EVENT, tenant_id, position)

    def position(self, tenant_id: str, token: str, *, field: str) -> int:
        """The event position a token of the tenant carries (CURSOR_NUMERIC, CURSOR_INVALID)."""
        return self.decode(EVENT, tenant_id, token, field=field)[0]
