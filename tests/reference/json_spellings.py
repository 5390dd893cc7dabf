"""JSON text as client JSON writers spell it (a helper of the reference tools, not collected by pytest).

`ClientWriter.write(value)` writes a parsed JSON value (JavaScript number semantics, as `parse_json` gives it)
with random spellings that JavaScript's JSON.parse reads back as the same value: numbers with a fraction or an
exponent (`6500.0`, `65E2`, `0.65e+4`, `650000e-2`, long mantissas), a double beyond 2**53 as all its digits,
`\\u` escapes of any character (either hex case, non-BMP characters as escaped surrogate pairs), `\\/`, white
space between tokens, keys in another order, a duplicate key whose earlier value the last one replaces.
`ClientWriter.body(text)` adds what JavaScript's `trim` removes around a request body (a BOM, U+00A0, U+2028,
U+3000, form feed, vertical tab) besides JSON's own white space. Every spelling is that of some real writer or
hand edit; none changes the value JSON.parse gives.
"""

from __future__ import annotations

import json
import random
from decimal import Decimal
from typing import Any

from settlekit.events.canonical import MAX_SAFE_INTEGER, js_number

JSON_BLANKS = (" ", "\t", "\n", "\r", "\r\n", "  ")
# white space JavaScript's String.prototype.trim removes and JSON.parse does not take
JS_ONLY_BLANKS = ("\ufeff", "\u00a0", "\u2028", "\u2029", "\u3000", "\u1680", "\u2007", "\x0b", "\x0c", "\u205f")
SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


class Raw(str):
    """A token written as it is (an edge case put into a value's place); lone surrogates in it stand for the bytes
    they escape (`surrogateescape`: "\\udce9" is the byte 0xE9)."""


class ClientWriter:
    def __init__(self, rnd: random.Random, rate: float = 0.3):
        self.rnd = rnd
        self.rate = rate  # how often a token gets an unusual spelling

    def _odd(self) -> bool:
        return self.rnd.random() < self.rate

    def _blank(self) -> str:
        return self.rnd.choice(JSON_BLANKS) if self._odd() else ""

    def write(self, value: Any) -> str:
        return self._blank() + self._value(value) + self._blank()

    def body(self, text: str) -> bytes:
        """A request body: `text` with what JavaScript's trim takes away around it, now and then."""
        before = after = ""
        if self._odd():
            before = "".join(self.rnd.choice(JS_ONLY_BLANKS + JSON_BLANKS) for _ in range(self.rnd.randint(1, 2)))
        if self._odd():
            after = "".join(self.rnd.choice(JS_ONLY_BLANKS + JSON_BLANKS) for _ in range(self.rnd.randint(1, 2)))
        return (before + text + after).encode("utf-8", "surrogateescape")

    def _value(self, value: Any) -> str:
        t = type(value)
        if t is Raw:
            return str(value)
        if value is None or t is bool:
            return json.dumps(value)
        if t is str:
            return self.string(value)
        if t is int or t is float:
            return self.number(value)
        if t is list:
            return "[" + self._blank() + ",".join(self.write(v) for v in value) + self._blank() + "]"
        if t is dict:
            keys = list(value)
            if self._odd():
                self.rnd.shuffle(keys)
            members = []
            for key in keys:
                if self._odd():  # an earlier value for the same key, which the last one replaces
                    members.append(self.string(key) + ":" + self.write(self.rnd.choice([None, 0, "x", [], {}])))
                members.append(self._blank() + self.string(key) + self._blank() + ":" + self.write(value[key]))
            return "{" + ",".join(members) + self._blank() + "}"
        raise TypeError(f"not JSON: {t.__name__}")

    def string(self, s: str) -> str:
        out = ['"']
        for ch in s:
            code = ord(ch)
            if ch in SHORT_ESCAPES or code < 0x20:
                out.append(SHORT_ESCAPES.get(ch) or f"\\u{code:04x}")
            elif self._odd():
                out.append(self._escaped(ch))
            elif 0xD800 <= code <= 0xDFFF:
                out.append(f"\\u{code:04x}")  # a lone surrogate has no UTF-8 spelling
            else:
                out.append(ch)
        out.append('"')
        return "".join(out)

    def _escaped(self, ch: str) -> str:
        if ch == "/" and self.rnd.random() < 0.5:
            return "\\/"
        units = ch.encode("utf-16-be", "surrogatepass")
        hexes = [units[i:i + 2].hex() for i in range(0, len(units), 2)]
        if self.rnd.random() < 0.5:
            hexes = [h.upper() for h in hexes]
        return "".join(f"\\u{h}" for h in hexes)

    def number(self, x: int | float) -> str:
        plain = js_number(float(x)) if type(x) is float else str(x)
        if not self._odd():
            return plain
        if type(x) is float and x.is_integer() and abs(x) > MAX_SAFE_INTEGER and self.rnd.random() < 0.5:
            return str(int(x))  # every digit, as a writer of 64-bit integers gives it
        digits = Decimal(repr(float(x))) if type(x) is float else Decimal(x)
        sign, coefficient, exponent = digits.as_tuple()
        mantissa = "".join(map(str, coefficient)).rstrip("0") or "0"
        exponent = int(exponent) + len("".join(map(str, coefficient))) - len(mantissa)  # value = mantissa * 10**exp
        minus = "-" if sign else ""

        def power(n: int) -> str:
            return self.rnd.choice("eE") + (self.rnd.choice(["", "+"]) if n >= 0 else "") + str(n)

        pick = self.rnd.randrange(6)
        if pick == 0:  # a fraction of zeros
            return plain + "." + "0" * self.rnd.randint(1, 3) if "." not in plain and "e" not in plain else plain
        if pick == 1:  # mantissa and exponent, no fraction
            return f"{minus}{mantissa}{power(exponent)}"
        if pick == 2:  # one digit before the point (scientific notation, as Java and .NET write it)
            point = mantissa[0] + "." + (mantissa[1:] or "0")
            return f"{minus}{point}{power(exponent + len(mantissa) - 1)}"
        if pick == 3:  # zero point something
            return f"{minus}0.{mantissa}{power(exponent + len(mantissa))}"
        if pick == 4 and x != 0:  # trailing zeros in the mantissa, a smaller exponent
            extra = self.rnd.randint(1, 4)
            return f"{minus}{mantissa}{'0' * extra}{power(exponent - extra)}"
        # more digits than a double holds, all zeros
        return f"{minus}{mantissa}.{'0' * self.rnd.randint(17, 30)}{power(exponent)}"
