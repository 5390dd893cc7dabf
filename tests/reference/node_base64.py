"""Strings in the spellings node's base64 decoder still reads, with what node 20 makes of them (a tool).

Makes signature-like strings (a real Ed25519 signature's base64, or random base64 text) and spells them as clients
and hand edits do: padding dropped or doubled, the URL-safe alphabet, white space and line breaks inside, bytes
outside the alphabet, '=' in the middle, non-ASCII characters (whose low byte node reads), lone surrogates, long
runs of filler; and short strings of every kind. Runs `node_base64.mjs` on them and writes
`{reference, cases: [[string, hex]]}` to `tests/vectors/node_base64.json.gz`, which
`tests/unit/test_node_base64.py` replays without node:

    python tests/reference/node_base64.py --node node [--seed 1] [--count 3000] [--out FILE]
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "vectors" / "node_base64.json.gz"
ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
FILLERS = [" ", "\n", "\r\n", "\t", "\f", "\v", ".", ",", "!", "*", "\x00", "\x7f", "\x80", "\xa0", "\u00e9",
           "\u2028", "\ufeff", "\u0141", "\u0144", "\u013d", "\u012b", "\u022f", "\U0001f600", "\U0001f47d",
           "\ud800", "\udc00", "%", "~", "\\", '"', "'", "=", "-", "_"]


def _spell(rng: random.Random, text: str) -> str:
    chars = list(text)
    kind = rng.randrange(12)
    if kind == 0:
        return text.rstrip("=")
    if kind == 1:
        return text.translate(str.maketrans("+/", "-_"))
    if kind == 2:
        step = rng.choice([4, 16, 64, 76])
        return rng.choice(["\n", "\r\n", " "]).join(text[i:i + step] for i in range(0, len(text), step))
    if kind == 3:
        for _ in range(rng.randrange(1, 6)):
            chars.insert(rng.randrange(len(chars) + 1), rng.choice(FILLERS))
        return "".join(chars)
    if kind == 4:
        cut = rng.randrange(len(text) + 1)
        return text[:cut] + "=" * rng.randrange(1, 4) + text[cut:]
    if kind == 5:
        return text + "=" * rng.randrange(0, 4)
    if kind == 6:
        return rng.choice(FILLERS) * rng.randrange(1, 40) + text + rng.choice(FILLERS) * rng.randrange(0, 40)
    if kind == 7:
        cut = rng.randrange(len(text) + 1)
        return text[:cut]
    if kind == 8:  # a character whose UTF-16 low byte is a base64 character
        i = rng.randrange(len(chars))
        chars[i] = chr(rng.choice([0x100, 0x200, 0x4E00, 0xFF00]) + ord(chars[i]))
        return "".join(chars)
    if kind == 9:
        return " ".join(text)
    if kind == 10:
        return "".join(rng.choice(ALPHABET + "=-_ \n") for _ in range(rng.randrange(0, 12)))
    return _spell(rng, _spell(rng, text))


def make_strings(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    fixed = ["", "=", "==", "A", "AA", "AAA", "AAAA", "AA=", "AA==", "AA===", "AB=CD", "Q=Q", "QUI", "QUI=",
             "-_-_", "+/+/", "A B\nC D", "QUJD\u00e9REVG", "QUJ\u0144", "QUJ\u013d", "QU\U0001f600JD",
             "QQ\x00QQ", "AAAAA", "AAAAAA", "AAAAAAA", "AAA=AAAA", "====AAAA", " " * 9000 + "QUJD",
             "QUJD" * 2000 + "QQ=", "QUJD" * 1500 + " " * 3000 + "QQ", "\ud800\udc00\ud800"]
    out = list(fixed)
    while len(out) < count:
        raw = bytes(rng.randrange(256) for _ in range(rng.choice([1, 2, 3, 32, 63, 64, 64, 64, 65])))
        out.append(_spell(rng, base64.b64encode(raw).decode("ascii")))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--node", default="node")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--count", type=int, default=3000)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    strings = make_strings(args.seed, args.count)
    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / "strings.json"
        path.write_text(json.dumps(strings), encoding="utf-8")
        answer = subprocess.run([args.node, str(HERE / "node_base64.mjs"), str(path)], check=True,
                                capture_output=True, text=True).stdout
    version = subprocess.run([args.node, "--version"], check=True, capture_output=True, text=True).stdout.strip()
    bundle = {"reference": f"node {version}, Buffer.from(s, 'base64')", "seed": args.seed,
              "cases": [[s, h] for s, h in zip(strings, json.loads(answer), strict=True)]}
    args.out.write_bytes(gzip.compress(json.dumps(bundle).encode("utf-8"), mtime=0))
    print(f"{len(strings)} strings -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
