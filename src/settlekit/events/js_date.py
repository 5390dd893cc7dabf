"""`Date.parse(s)` as node 20 (V8 11.3) computes it, with the local time zone taken to be UTC.

V8 reads a date string in two stages over one token stream:

1. the ES date-time string format (`[+-YY]YYYY[-MM[-DD]][THH:mm[:ss[.fff…]][Z|±hh:mm|±hhmm]]`); when the whole
   string matches, it is a date (a date-only form is UTC, a date-time form without a zone is local time);
2. when it stops matching before the end (and not after a `T`), what is left goes to V8's lenient "legacy" reader,
   which collects numbers into day (month/day/year, in some order) and time components, month names, AM/PM,
   time-zone names and `±hh[mm]` offsets, skipping unknown characters and parenthesised comments.

The parts are then combined as ECMAScript's MakeDay/MakeTime/MakeDate do (so `2026-02-30` rolls over to March 2)
and clipped to the time range (±8.64e15 ms); anything else is NaN. The quirks of V8's reader are kept on purpose:
a numeral keeps at most 9 significant digits (leading zeros skipped), a word is any run of characters from 'A' up
(only its first three letters matter, and only month names may be longer), a NUL character ends the input, and
only ASCII digits count as digits. The string is read as UTF-16 code units, as V8 does.
"""

from __future__ import annotations

import array
import functools
import math
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum, auto
from typing import Final

__all__ = ["js_date_parse_ms"]

_NONE: Final = 2**31 - 1  # a component that was not given (V8's kMaxInt marker)
_MAX_DIGITS: Final = 9  # significant digits kept of a numeral
_MS_PER_DAY: Final = 86_400_000
_MAX_TIME_MS: Final = 8_640_000_000_000_000  # the ECMAScript time range: ±1e8 days
_MAX_YEAR: Final = 1_000_000  # MakeDay refuses years beyond ±1e6
_MAX_OFFSET_SECONDS: Final = 2**31 - 1

# ECMAScript WhiteSpace (TAB, VT, FF, SP, NBSP, ZWNBSP and the Zs space separators) and LineTerminator.
_WHITESPACE: Final = frozenset(
    [0x09, 0x0B, 0x0C, 0x20, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x202F, 0x205F, 0x3000, 0xFEFF]
)
_LINE_TERMINATORS: Final = frozenset([0x0A, 0x0D, 0x2028, 0x2029])
_SYMBOLS: Final = frozenset(map(ord, ":-+.)"))


class _Kind(Enum):
    NUMBER = auto()
    SYMBOL = auto()  # one of : - + . )
    WHITESPACE = auto()
    UNKNOWN = auto()  # any other character, or a parenthesised comment
    WORD = auto()
    END = auto()
    INVALID = auto()  # only returned by the ISO reader: the string cannot be a date


class _Word(Enum):
    GARBAGE = auto()  # a word that is none of the below (weekday names included)
    MONTH = auto()
    ZONE = auto()
    T = auto()  # the ISO date/time separator
    AM_PM = auto()


_MONTHS: Final = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")

# Words by their (lower-cased) first letters: kind and value (month number, hours east of UTC, hours to add).
_KEYWORDS: Final[dict[str, tuple[_Word, int]]] = {
    **{m: (_Word.MONTH, i) for i, m in enumerate(_MONTHS, start=1)},
    "am": (_Word.AM_PM, 0),
    "pm": (_Word.AM_PM, 12),
    "ut": (_Word.ZONE, 0),
    "utc": (_Word.ZONE, 0),
    "z": (_Word.ZONE, 0),
    "gmt": (_Word.ZONE, 0),
    "cdt": (_Word.ZONE, -5),
    "cst": (_Word.ZONE, -6),
    "edt": (_Word.ZONE, -4),
    "est": (_Word.ZONE, -5),
    "mdt": (_Word.ZONE, -6),
    "mst": (_Word.ZONE, -7),
    "pdt": (_Word.ZONE, -7),
    "pst": (_Word.ZONE, -8),
    "t": (_Word.T, 0),
}


@dataclass(frozen=True, slots=True)
class _Token:
    kind: _Kind
    value: int = 0  # a number's value, a symbol's character code, a word's keyword value
    length: int = 0  # characters read (digits of a number, letters of a word)
    word: _Word = _Word.GARBAGE

    def is_symbol(self, c: str) -> bool:
        return self.kind is _Kind.SYMBOL and self.value == ord(c)

    def is_sign(self) -> bool:
        return self.is_symbol("+") or self.is_symbol("-")

    def sign(self) -> int:
        return 1 if self.value == ord("+") else -1

    def is_number(self, length: int | None = None) -> bool:
        return self.kind is _Kind.NUMBER and (length is None or self.length == length)

    def is_word(self, word: _Word) -> bool:
        return self.kind is _Kind.WORD and self.word is word

    def is_z(self) -> bool:
        """The single letter Z (not UT, UTC or GMT)."""
        return self.is_word(_Word.ZONE) and self.length == 1 and self.value == 0


_END: Final = _Token(_Kind.END)
_INVALID: Final = _Token(_Kind.INVALID)


# --- tokenizer -------------------------------------------------------------------------------------------------------


def _is_digit(c: int) -> bool:
    return 0x30 <= c <= 0x39


def _is_word_char(c: int) -> bool:
    return c >= 0x41 and c not in _WHITESPACE  # 'A' and above, line terminators included


def _lower(c: int) -> str:
    """ASCII letters lower-cased; anything else maps to a character no keyword contains."""
    return chr(c | 0x20) if 0x41 <= c <= 0x5A or 0x61 <= c <= 0x7A else "?"


_WHITESPACE_TOKEN: Final = _Token(_Kind.WHITESPACE, 0, 1)
_UNKNOWN_TOKEN: Final = _Token(_Kind.UNKNOWN, 0, 1)
_SYMBOL_TOKENS: Final = {c: _Token(_Kind.SYMBOL, c, 1) for c in _SYMBOLS}
_SKIPPED: Final = (_Kind.WHITESPACE, _Kind.UNKNOWN)
# Symbols by class ('+' and '-' are one: signs). A run of one class is kept as its first three tokens: lookahead
# takes at most two of a run (`n::`, or a sign after a number or month), and a third is skipped, or refuses the
# string, or (a sign) is an offset's sign, which a fourth would refuse as the third already does.
_SYMBOL_GROUP: Final = {ord(":"): 0, ord("."): 1, ord(")"): 2, ord("+"): 3, ord("-"): 3}
_SYMBOL_RUN: Final = 3
_SIGN_CODES: Final = frozenset(map(ord, "+-"))
# Inert tokens: blanks, unknown characters, comments, `:` and `.`. Only the first two of a run can be taken by
# lookahead (`n::`, `n:.`) or looked at (the token after a number, word or sign); in the readers' main loop an inert
# token does nothing. So a run is kept as its first three tokens and the rest skipped unread.
_INERT_RUN: Final = 3
# (every code unit from 'A' up is a word character, except the white space)
_INERT_UNITS: Final = _WHITESPACE | frozenset(
    c for c in range(0x41) if not (c == 0 or _is_digit(c) or c in _SIGN_CODES or c in (0x28, 0x29)))
_CLOSE_PAREN: Final = ord(")")


def _tokenize(units: list[int]) -> Iterator[_Token]:
    """The token stream up to (and including) the end, as the readers ask for it (a refused string is not read
    to its end); a NUL code unit ends the input.

    A run of blanks and unknown characters is kept as its first token: the readers skip both kinds and look only
    at the first token after a number, word or sign, so the rest of a run changes nothing; a run of symbols of
    one class is kept as its first three (see _SYMBOL_GROUP). A long run of junk costs a token or two, not one per
    character."""
    n = len(units)
    last = _END  # the last token given
    inert = 0  # inert tokens given in a row
    i = 0
    while True:
        c = units[i] if i < n else 0
        if c == 0:
            yield _END
            return
        if inert >= _INERT_RUN:  # the rest of an inert run is skipped, up to the next character that counts
            while i < n and units[i] in _INERT_UNITS:
                i += 1
            inert = 0
            last = _UNKNOWN_TOKEN
            continue
        start = i
        if _is_digit(c):
            while i < n and units[i] == 0x30:  # leading zeros are not significant
                i += 1
            value, kept = 0, 0
            while i < n and _is_digit(units[i]):
                if kept < _MAX_DIGITS:
                    value = value * 10 + units[i] - 0x30
                kept += 1
                i += 1
            last, inert = _Token(_Kind.NUMBER, value, i - start), 0
            yield last
        elif c in _SYMBOLS:
            group = _SYMBOL_GROUP[c]
            run = 0
            while i < n and _SYMBOL_GROUP.get(units[i]) == group:
                if run < _SYMBOL_RUN:
                    last = _SYMBOL_TOKENS[units[i]]
                    inert = inert + 1 if units[i] in _INERT_UNITS else 0
                    yield last
                run += 1
                i += 1
        elif _is_word_char(c):
            while i < n and _is_word_char(units[i]):
                i += 1
            length = i - start
            prefix = "".join(_lower(u) for u in units[start : min(i, start + 3)])
            kind, value = _KEYWORDS.get(prefix, (_Word.GARBAGE, 0))
            if length > 3 and kind is not _Word.MONTH:  # only month names may run on ("January", "Sept")
                kind, value = _Word.GARBAGE, 0
            last, inert = _Token(_Kind.WORD, value, length, kind), 0
            yield last
        elif c in _WHITESPACE or c in _LINE_TERMINATORS:
            if last.kind not in _SKIPPED:
                last, inert = _WHITESPACE_TOKEN, inert + 1
                yield last
            i += 1
        else:
            if c == 0x28:  # '(' starts a comment running to its matching ')' (or the end, or a NUL)
                depth = 0
                while True:
                    c = units[i] if i < n else 0
                    depth += 1 if c == 0x28 else -1 if c == 0x29 else 0
                    i += 1
                    if depth <= 0 or (units[i] if i < n else 0) == 0:
                        break
            else:
                i += 1
            if last.kind not in _SKIPPED:
                last, inert = _UNKNOWN_TOKEN, inert + 1
                yield last


class _Scanner:
    """One-token lookahead over the token stream."""

    def __init__(self, tokens: Iterator[_Token]) -> None:
        self._tokens = tokens
        self._current = next(tokens)

    def peek(self) -> _Token:
        return self._current

    def next(self) -> _Token:
        token = self._current
        if token.kind is not _Kind.END:
            self._current = next(self._tokens)
        return token

    def skip_symbol(self, c: str) -> bool:
        if self._current.is_symbol(c):
            self._current = next(self._tokens)
            return True
        return False


# --- the components being collected ----------------------------------------------------------------------------------


def _between(x: int, lo: int, hi: int) -> bool:
    return lo <= x <= hi


def _is_minute(x: int) -> bool:
    return 0 <= x <= 59


def _is_hour(x: int) -> bool:
    return 0 <= x <= 23


class _Day:
    """Up to three date numbers, a named month, and whether the ISO reader accepted them (fixed Y-M-D order)."""

    def __init__(self) -> None:
        self.comp: list[int] = []
        self.named_month = _NONE
        self.iso = False

    def add(self, n: int) -> bool:
        if len(self.comp) >= 3:
            return False
        self.comp.append(n)
        return True

    def resolve(self) -> tuple[int, int, int] | None:
        """(year, month 1-12, day 1-31), or None when the numbers do not make a date."""
        if not self.comp:
            return None
        # Missing components are 1, and then count as given: a lone number is a month, day 1 of year 1 (2001).
        first, second, third = self.comp + [1] * (3 - len(self.comp))
        if self.named_month == _NONE:
            if self.iso or not _between(first, 1, 31):
                year, month, day = first, second, third
            else:
                month, day, year = first, second, third
        else:
            month = self.named_month
            if not _between(first, 1, 31):
                year, day = first, second  # year first ("2026 Jan 5", "2026 5 Jan")
            else:
                day, year = first, second  # day first ("5 Jan 2026", "Jan 5 2026")
        if not self.iso:
            if _between(year, 0, 49):
                year += 2000
            elif _between(year, 50, 99):
                year += 1900
        if not (-(2**30) <= year < 2**30 and _between(month, 1, 12) and _between(day, 1, 31)):
            return None
        return year, month, day


class _Time:
    """Hour, minute, second, millisecond in the order read, and an AM/PM adjustment."""

    def __init__(self) -> None:
        self.comp: list[int] = []
        self.hour_offset = _NONE

    def is_empty(self) -> bool:
        return not self.comp

    def is_expecting(self, n: int) -> bool:
        i = len(self.comp)
        return (i == 1 and _is_minute(n)) or (i == 2 and _is_minute(n)) or (i == 3 and _between(n, 0, 999))

    def add(self, n: int) -> bool:
        if len(self.comp) >= 4:
            return False
        self.comp.append(n)
        return True

    def add_final(self, n: int) -> bool:
        if not self.add(n):
            return False
        self.comp += [0] * (4 - len(self.comp))
        return True

    def resolve(self) -> tuple[int, int, int, int] | None:
        hour, minute, second, ms = self.comp + [0] * (4 - len(self.comp))
        if self.hour_offset != _NONE:
            if not _between(hour, 0, 12):
                return None
            hour = hour % 12 + self.hour_offset
        in_range = _is_hour(hour) and _is_minute(minute) and _is_minute(second) and _between(ms, 0, 999)
        if not in_range and not (hour == 24 and minute == 0 and second == 0 and ms == 0):
            return None  # 24:00:00.000 is the only time past 23:59:59.999
        return hour, minute, second, ms


class _Zone:
    """The UTC offset: sign, hours and minutes, each possibly absent."""

    def __init__(self) -> None:
        self.sign = _NONE
        self.hour = _NONE
        self.minute = _NONE

    def set_hours(self, hours: int) -> None:
        self.sign = -1 if hours < 0 else 1
        self.hour = abs(hours)
        self.minute = 0

    def is_expecting(self, n: int) -> bool:
        return self.hour != _NONE and self.minute == _NONE and _is_minute(n)

    def is_utc(self) -> bool:
        return self.hour == 0 and self.minute == 0

    def is_empty(self) -> bool:
        return self.hour == _NONE

    def resolve(self) -> tuple[bool, int | None]:
        """(valid, offset in seconds east of UTC); the offset is None when no zone was given (local time)."""
        if self.sign == _NONE:
            return True, None
        hour = 0 if self.hour == _NONE else self.hour
        minute = 0 if self.minute == _NONE else self.minute
        total = (hour * 3600 + minute * 60) % 2**32  # V8 computes this in unsigned 32-bit arithmetic
        if total > _MAX_OFFSET_SECONDS:
            return False, None
        return True, -total if self.sign < 0 else total


# --- the ISO reader --------------------------------------------------------------------------------------------------


def _fraction_ms(token: _Token) -> int:
    """Milliseconds from a fraction's digits: the first three digits, as V8 infers them from value and length."""
    number, length = token.value, token.length
    if length == 1:
        return number * 100
    if length == 2:
        return number * 10
    if length > 3:
        return number // 10 ** (min(length, _MAX_DIGITS) - 3)
    return number


def _read_iso(scan: _Scanner, day: _Day, time: _Time, zone: _Zone) -> _Token:
    """Read as much as fits the ES date-time format. Returns END when the whole string fits, INVALID when the
    string cannot be a date at all (the time part started but broke off), else the first token left for the
    legacy reader."""
    if scan.peek().is_sign():
        sign_token = scan.next()
        if not scan.peek().is_number(6):
            return sign_token
        year = scan.next().value
        if sign_token.sign() < 0 and year == 0:
            return sign_token  # -000000 is not a year
        day.add(sign_token.sign() * year)
    elif scan.peek().is_number(4):
        day.add(scan.next().value)
    else:
        return scan.next()
    if scan.skip_symbol("-"):
        if not (scan.peek().is_number(2) and _between(scan.peek().value, 1, 12)):
            return scan.next()
        day.add(scan.next().value)
        if scan.skip_symbol("-"):
            if not (scan.peek().is_number(2) and _between(scan.peek().value, 1, 31)):
                return scan.next()
            day.add(scan.next().value)
    if not scan.peek().is_word(_Word.T):
        if scan.peek().kind is not _Kind.END:
            return scan.next()
    else:
        scan.next()
        if not (scan.peek().is_number(2) and _between(scan.peek().value, 0, 24)):
            return _INVALID
        hour_is_24 = scan.peek().value == 24
        time.add(scan.next().value)
        if not scan.skip_symbol(":"):
            return _INVALID
        if not (scan.peek().is_number(2) and _is_minute(scan.peek().value)) or (hour_is_24 and scan.peek().value):
            return _INVALID
        time.add(scan.next().value)
        if scan.skip_symbol(":"):
            if not (scan.peek().is_number(2) and _is_minute(scan.peek().value)) or (hour_is_24 and scan.peek().value):
                return _INVALID
            time.add(scan.next().value)
            if scan.skip_symbol("."):
                if not scan.peek().is_number() or (hour_is_24 and scan.peek().value):
                    return _INVALID
                time.add(_fraction_ms(scan.next()))
        if scan.peek().is_z():
            scan.next()
            zone.set_hours(0)
        elif scan.peek().is_sign():
            zone.sign = scan.next().sign()
            if scan.peek().is_number(4):  # hhmm
                hours, minutes = divmod(scan.next().value, 100)
                if not (_is_hour(hours) and _is_minute(minutes)):
                    return _INVALID
                zone.hour, zone.minute = hours, minutes
            else:  # hh:mm
                if not (scan.peek().is_number(2) and _is_hour(scan.peek().value)):
                    return _INVALID
                zone.hour = scan.next().value
                if not scan.skip_symbol(":"):
                    return _INVALID
                if not (scan.peek().is_number(2) and _is_minute(scan.peek().value)):
                    return _INVALID
                zone.minute = scan.next().value
        if scan.peek().kind is not _Kind.END:
            return _INVALID
    if zone.is_empty() and time.is_empty():
        zone.set_hours(0)  # a date-only form is UTC
    day.iso = True
    return _END


# --- the legacy reader -----------------------------------------------------------------------------------------------


def _read_legacy(scan: _Scanner, token: _Token, day: _Day, time: _Time, zone: _Zone) -> bool:
    """Read the rest of the string leniently, from `token` on; False when the string is refused."""
    has_number = bool(day.comp)
    while token.kind is not _Kind.END:
        if token.kind is _Kind.NUMBER:
            has_number = True
            n = token.value
            if scan.skip_symbol(":"):
                if scan.skip_symbol(":"):  # "n::" is hours and minute zero
                    if not time.is_empty():
                        return False
                    time.add(n)
                    time.add(0)
                else:
                    if not time.add(n):
                        return False
                    if scan.peek().is_symbol("."):
                        scan.next()
            elif scan.skip_symbol(".") and time.is_expecting(n):  # "ss.fff" (the '.' is skipped in any case)
                time.add(n)
                if not scan.peek().is_number():
                    return False
                time.add_final(_fraction_ms(scan.next()))
            elif zone.is_expecting(n):
                zone.minute = n
            elif time.is_expecting(n):
                time.add_final(n)
                after = scan.peek()
                if not (after.kind in (_Kind.END, _Kind.WHITESPACE) or after.is_z() or after.is_sign()):
                    return False
            else:
                if not day.add(n):
                    return False
                scan.skip_symbol("-")
        elif token.kind is _Kind.WORD:
            if token.word is _Word.AM_PM and not time.is_empty():
                time.hour_offset = token.value
            elif token.word is _Word.MONTH:
                day.named_month = token.value
                scan.skip_symbol("-")
            elif token.word is _Word.ZONE and has_number:
                zone.set_hours(token.value)
            else:
                # Other words may only come before the first number, and not right against it.
                if has_number or scan.peek().is_number():
                    return False
        elif token.kind is not _Kind.SYMBOL:
            pass  # blanks and unknown characters are skipped
        elif token.value in _SIGN_CODES and (zone.is_utc() or not time.is_empty()):
            # A UTC offset, after a zone name or a time: ±h, ±hh, ±hmm, ±hhmm or ±h…: (hours only).
            zone.sign = token.sign()
            n, length = 0, 0
            if scan.peek().is_number():
                number = scan.next()
                n, length = number.value, number.length
            has_number = True
            if scan.peek().is_symbol(":"):
                zone.hour, zone.minute = n, _NONE
            elif length in (1, 2):
                zone.hour, zone.minute = n, 0
            elif length in (3, 4):
                zone.hour, zone.minute = divmod(n, 100)
            else:
                return False
        elif has_number and (token.value in _SIGN_CODES or token.value == _CLOSE_PAREN):
            return False
        token = scan.next()
    return True


# --- composition -----------------------------------------------------------------------------------------------------


def _days_from_civil(year: int, month: int, day: int) -> int:
    """MakeDay: days since 1970-01-01 of `day` (counting on past the month's end) in `month` (1-12) of `year`."""
    days = 365 * (year - 1970) + (year - 1969) // 4 - (year - 1901) // 100 + (year - 1601) // 400
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    before = (0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334)[month - 1]
    return days + before + (1 if leap and month > 2 else 0) + day - 1


# The form every settlekit and settld timestamp has (`Date.prototype.toISOString`), read without the tokenizer.
_CANONICAL: Final = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})\.([0-9]{3})Z")


def js_date_parse_ms(s: str) -> float:
    """`Date.parse(s)` in node 20 with TZ=UTC: milliseconds since the epoch, or NaN (short strings are cached)."""
    return _parse_cached(s) if len(s) <= 64 else _parse(s)


@functools.lru_cache(maxsize=8192)
def _parse_cached(s: str) -> float:
    return _parse(s)


def _code_units(s: str) -> list[int]:
    """The string's UTF-16 code units."""
    raw = array.array("H", s.encode("utf-16-le", "surrogatepass"))
    if sys.byteorder == "big":
        raw.byteswap()
    return raw.tolist()


def _parse(s: str) -> float:
    m = _CANONICAL.fullmatch(s)
    if m is not None:
        year, month, dom, hour, minute, second, ms = map(int, m.groups())
        if 1 <= month <= 12 and 1 <= dom <= 31 and hour < 24 and minute < 60 and second < 60:
            return float(_days_from_civil(year, month, dom) * _MS_PER_DAY
                         + ((hour * 60 + minute) * 60 + second) * 1000 + ms)
    units = _code_units(s)
    scan = _Scanner(_tokenize(units))
    day, time, zone = _Day(), _Time(), _Zone()
    rest = _read_iso(scan, day, time, zone)
    if rest.kind is _Kind.INVALID or not _read_legacy(scan, rest, day, time, zone):
        return math.nan
    date, clock = day.resolve(), time.resolve()
    zone_ok, offset = zone.resolve()
    if date is None or clock is None or not zone_ok:
        return math.nan
    year, month, dom = date
    if abs(year) > _MAX_YEAR:
        return math.nan
    hour, minute, second, ms = clock
    t = _days_from_civil(year, month, dom) * _MS_PER_DAY + ((hour * 60 + minute) * 60 + second) * 1000 + ms
    if offset is not None:  # no zone: local time, which is UTC here
        t -= offset * 1000
    if abs(t) > _MAX_TIME_MS:
        return math.nan
    return float(t)
