"""Point-in-time sums over the journal: the bucket levels of the two axes (entry time, ledger position).

Every posting adds its amount to one bucket per level of each axis. A sum "as of K" is then the full buckets of
each level that lie before K inside K's bucket of the level above, plus the postings of K's finest bucket up to K:
at most a few hundred bucket rows per account whatever the ledger's size. The levels nest (each size divides the
one above), so the ranges never overlap.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Final, Literal

from settlekit.events.canonical import iso_millis
from settlekit.events.js import date_parse_ms

Axis = Literal["t", "p"]

# Bucket sizes, coarsest first: time in epoch milliseconds (32 days, a day, an hour, five minutes), position in
# event-store positions (a million, 50,000, 2,500, 50). Below the coarsest level a query reads at most 12 to 50
# buckets per level and account. An account's postings are dense, so even its finest buckets add several up.
LEVELS: Final[dict[Axis, tuple[int, ...]]] = {
    "t": (32 * 86_400_000, 86_400_000, 3_600_000, 300_000),
    "p": (1_000_000, 50_000, 2_500, 50),
}
# A party's allocations are sparse (most parties are on few entries): fine buckets would hold one allocation
# each and only multiply the rows, so a party's sums stop at a day and at 2,500 positions.
PARTY_LEVELS: Final[dict[Axis, tuple[int, ...]]] = {
    "t": LEVELS["t"][:2],
    "p": LEVELS["p"][:3],
}


def levels_of(axis: Axis, party_id: str) -> tuple[int, ...]:
    """The bucket sizes of an account's own postings (party '') or of a party's allocations."""
    return (LEVELS if party_id == "" else PARTY_LEVELS)[axis]


def bucket_start(value: int, size: int) -> int:
    """The start of the bucket of `size` that holds `value`."""
    return (value // size) * size


def buckets_of(sizes: tuple[int, ...], value: int) -> Iterator[tuple[int, int]]:
    """(level, bucket start) of `value` at every level of `sizes`."""
    for level, size in enumerate(sizes):
        yield level, bucket_start(value, size)


def prefix_ranges(sizes: tuple[int, ...], value: int) -> tuple[list[tuple[int, int | None, int]], int]:
    """What "as of `value`" sums: [(level, lowest bucket start or None, bucket start bound (exclusive))] and the
    start of the finest bucket, from which the postings themselves are summed up to `value` inclusive."""
    ranges: list[tuple[int, int | None, int]] = []
    lower: int | None = None
    for level, size in enumerate(sizes):
        upper = bucket_start(value, size)
        ranges.append((level, lower, upper))
        lower = upper
    assert lower is not None
    return ranges, lower


def epoch_millis(at: str) -> int:
    """A stored entry time (ISO-8601; UTC when it names no offset) as epoch milliseconds. A time of imported
    history in another spelling settld's `Date.parse` reads (a date alone, lower-case `t`/`z`, an expanded
    year, RFC 1123, ...) is read as it reads it; ValueError when neither reads it."""
    try:
        moment = datetime.fromisoformat(at.replace("Z", "+00:00"))
    except ValueError:
        millis = date_parse_ms(at)
        if math.isnan(millis):
            raise
        return int(millis)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return _millis(moment)


def parse_instant(text: str) -> int | None:
    """A query's instant (ISO-8601 with a UTC offset or Z) as epoch milliseconds (truncated: a posting at
    millisecond m is at or before the instant exactly when m is); None when it is not one."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    millis = _millis(moment)
    return millis if _YEAR_1_MS <= millis <= _YEAR_9999_END_MS else None  # a UTC instant in years 1 to 9999


_YEAR_1_MS: Final = -62_135_596_800_000  # 0001-01-01T00:00:00.000Z
_YEAR_9999_END_MS: Final = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z


def _millis(moment: datetime) -> int:
    """Epoch milliseconds of an aware datetime, also when its UTC instant lies just outside years 1 to 9999 (the
    local time `0001-01-01T00:00+00:01` is an instant of year 0, which settld's Date.parse reads)."""
    offset = moment.utcoffset() or timedelta(0)
    delta = moment.replace(tzinfo=None) - datetime(1970, 1, 1)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000 - _whole_millis(offset)


def _whole_millis(delta: timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def millis_to_iso(millis: int) -> str:
    """Epoch milliseconds as `YYYY-MM-DDTHH:MM:SS.mmmZ`."""
    return iso_millis(datetime.fromtimestamp(millis // 1000, tz=UTC) + timedelta(milliseconds=millis % 1000))


def encode_cursor(account_id: str, party_id: str, key: tuple[int, int, int]) -> str:
    """An opaque page cursor: the listing it belongs to and the key of the last row returned."""
    text = json.dumps([account_id, party_id, *key], separators=(",", ":"), ensure_ascii=False)
    return base64.urlsafe_b64encode(text.encode("utf-8", "surrogatepass")).decode("ascii").rstrip("=")


def decode_cursor(cursor: str, account_id: str, party_id: str) -> tuple[int, int, int] | None:
    """The key a cursor carries, or None when it is malformed or belongs to another listing."""
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
        value = json.loads(raw.decode("utf-8", "surrogatepass"))
    except ValueError:
        return None
    if (not isinstance(value, list) or len(value) != 5 or value[:2] != [account_id, party_id]
            or not all(type(v) is int and 0 <= v < 2**63 for v in value[2:])):
        return None
    return value[2], value[3], value[4]
