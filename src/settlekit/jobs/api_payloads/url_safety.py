"""settld's synchronous URL safety check (core/url-safety.js `checkUrlSafetySync`), as evidence refs use it.

URLs are parsed by Ada, the WHATWG URL parser node's `new URL` is built on: ada-url 1.15.3 bundles Ada 2.9.2,
node 20's own (later Ada releases accept and refuse other hosts). `net.isIP` and the public-address rules are
mirrored as node 20 and settld write them.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Final

import ada_url

from settlekit.jobs.api_payloads._js import js_trim, non_empty_string

INVALID_URL: Final = "URL_INVALID"
SCHEME_FORBIDDEN: Final = "URL_SCHEME_FORBIDDEN"
USERINFO_FORBIDDEN: Final = "URL_USERINFO_FORBIDDEN"
HOST_FORBIDDEN: Final = "URL_HOST_FORBIDDEN"

DEFAULT_ALLOWED_SCHEMES: Final = ("https", "s3", "gcs", "gs", "minio", "obj")
# schemes naming object-store refs: accepted once they parse, with no host checks
_OPAQUE_SCHEMES: Final = frozenset({"obj", "s3", "gcs", "gs", "minio"})
_METADATA_HOSTNAMES: Final = frozenset({"metadata.google.internal", "metadata.azure.internal"})

# node 20's net.isIPv4 / net.isIPv6 patterns (lib/internal/net.js)
_V4_SEG: Final = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])"
_V4_STR: Final = rf"(?:{_V4_SEG}\.){{3}}{_V4_SEG}"
_V6_SEG: Final = "(?:[0-9a-fA-F]{1,4})"
_NODE_IPV4: Final = re.compile(_V4_STR)
_NODE_IPV6: Final = re.compile(
    "(?:"
    f"(?:{_V6_SEG}:){{7}}(?:{_V6_SEG}|:)|"
    f"(?:{_V6_SEG}:){{6}}(?:{_V4_STR}|:{_V6_SEG}|:)|"
    f"(?:{_V6_SEG}:){{5}}(?::{_V4_STR}|(?::{_V6_SEG}){{1,2}}|:)|"
    f"(?:{_V6_SEG}:){{4}}(?:(?::{_V6_SEG}){{0,1}}:{_V4_STR}|(?::{_V6_SEG}){{1,3}}|:)|"
    f"(?:{_V6_SEG}:){{3}}(?:(?::{_V6_SEG}){{0,2}}:{_V4_STR}|(?::{_V6_SEG}){{1,4}}|:)|"
    f"(?:{_V6_SEG}:){{2}}(?:(?::{_V6_SEG}){{0,3}}:{_V4_STR}|(?::{_V6_SEG}){{1,5}}|:)|"
    f"(?:{_V6_SEG}:){{1}}(?:(?::{_V6_SEG}){{0,4}}:{_V4_STR}|(?::{_V6_SEG}){{1,6}}|:)|"
    f"(?::(?:(?::{_V6_SEG}){{0,5}}:{_V4_STR}|(?::{_V6_SEG}){{1,7}}|:))"
    ")(?:%[0-9a-zA-Z.:-]{1,})?"
)
_DIGITS: Final = re.compile("[0-9]+")
_HEXTET: Final = re.compile("[0-9a-f]{1,4}")
_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def node_is_ip(s: str) -> int:
    """`net.isIP(s)`: 4, 6 or 0."""
    if _NODE_IPV4.fullmatch(s):
        return 4
    if _NODE_IPV6.fullmatch(s):
        return 6
    return 0


def _strip_trailing_dot(hostname: str) -> str:
    h = js_trim(hostname).lower()
    return h[:-1] if h.endswith(".") else h


def _is_metadata_hostname(hostname: str) -> bool:
    return _strip_trailing_dot(hostname) in _METADATA_HOSTNAMES


def _parse_ipv4(ip: str) -> list[int] | None:
    """settld's strict dotted-quad reader: four runs of ASCII digits, each at most 255."""
    parts = js_trim(ip).split(".")
    if len(parts) != 4:
        return None
    octets = []
    for part in parts:
        if not _DIGITS.fullmatch(part) or len(part.lstrip("0")) > 3:
            return None
        n = int(part)
        if n > 255:
            return None
        octets.append(n)
    return octets


def is_public_ipv4(ip: str, *, allow_loopback: bool = False, allow_private: bool = False) -> bool:
    octets = _parse_ipv4(ip)
    if octets is None:
        return False
    first, second = octets[0], octets[1]
    if first == 0 or first >= 224:  # unspecified, multicast, reserved, broadcast
        return False
    if not allow_loopback and first == 127:
        return False
    if allow_private:
        return True
    private_ranges = (
        first == 169 and second == 254,  # link-local
        first == 10,
        first == 172 and 16 <= second <= 31,
        first == 192 and second == 168,
        first == 100 and 64 <= second <= 127,  # CGNAT
        first == 198 and second in (18, 19),  # benchmarking
    )
    return not any(private_ranges)


def _parse_ipv6_hextets(ip: str) -> list[int] | None:
    value = js_trim(ip).lower()
    zone = value.find("%")
    if zone != -1:
        value = value[:zone]
    if value == "":
        return None
    halves = value.split("::")
    if len(halves) > 2:
        return None
    compressed = len(halves) == 2
    head = [h for h in halves[0].split(":") if h] if halves[0] else []
    tail = [h for h in halves[1].split(":") if h] if compressed and halves[1] else []
    _expand_trailing_ipv4(head)
    _expand_trailing_ipv4(tail)

    total = len(head) + len(tail)
    if (not compressed and total != 8) or total > 8:
        return None
    groups = head + ["0"] * (8 - total if compressed else 0) + tail
    if len(groups) != 8:
        return None
    hextets = []
    for group in groups:
        if not _HEXTET.fullmatch(group):
            return None
        hextets.append(int(group, 16))
    return hextets


def _expand_trailing_ipv4(groups: list[str]) -> None:
    """Replace a trailing dotted quad by its two hextets (left alone when it does not parse)."""
    if not groups or "." not in groups[-1]:
        return
    octets = _parse_ipv4(groups[-1])
    if octets is None:
        return
    groups[-1:] = [format(octets[0] << 8 | octets[1], "x"), format(octets[2] << 8 | octets[3], "x")]


def is_public_ipv6(ip: str, *, allow_loopback: bool = False, allow_private: bool = False) -> bool:
    hextets = _parse_ipv6_hextets(ip)
    if hextets is None:
        return False
    if all(h == 0 for h in hextets):
        return False
    if not allow_loopback and all(h == 0 for h in hextets[:7]) and hextets[7] == 1:
        return False
    first = hextets[0]
    if not allow_private and (0xFC00 <= first <= 0xFDFF or 0xFE80 <= first <= 0xFEBF):  # unique/link local
        return False
    if first >= 0xFF00:  # multicast
        return False
    if all(h == 0 for h in hextets[:5]) and hextets[5] == 0xFFFF:  # IPv4-mapped
        v4 = f"{hextets[6] >> 8}.{hextets[6] & 0xFF}.{hextets[7] >> 8}.{hextets[7] & 0xFF}"
        return is_public_ipv4(v4, allow_loopback=allow_loopback, allow_private=allow_private)
    return True


def _as_usv_string(s: str) -> str:
    """What node hands its URL parser: surrogate pairs joined, lone surrogates replaced by U+FFFD."""
    if not _LONE_SURROGATE.search(s):
        return s
    return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def url_safety_code(
    target: str,
    *,
    allow_http: bool = False,
    allow_private: bool = False,
    allow_loopback: bool = False,
    allowed_schemes: Collection[str] = DEFAULT_ALLOWED_SCHEMES,
) -> str | None:
    """The code `checkUrlSafetySync` refuses `target` with (None when it is safe). settld's production setting
    refuses http:// (PROXY_ALLOW_HTTP_URLS unset, NODE_ENV neither development nor test)."""
    non_empty_string(target, "target")
    raw = js_trim(target)
    if "\n" in raw or "\r" in raw:
        return INVALID_URL

    colon = raw.find(":")
    if colon == -1:
        return INVALID_URL
    scheme = js_trim(raw[:colon]).lower()
    if not scheme:
        return INVALID_URL
    if scheme not in allowed_schemes and not (allow_http and scheme == "http"):
        return SCHEME_FORBIDDEN
    if scheme == "http" and not allow_http:
        return SCHEME_FORBIDDEN

    try:
        url = ada_url.URL(_as_usv_string(raw))
    except ValueError:
        return INVALID_URL
    if scheme in _OPAQUE_SCHEMES:
        return None

    if url.username or url.password:
        return USERINFO_FORBIDDEN
    hostname = _strip_trailing_dot(url.hostname)
    if not hostname:
        return INVALID_URL
    if (hostname == "localhost" and not allow_loopback) or _is_metadata_hostname(hostname):
        return HOST_FORBIDDEN

    # an IPv6 hostname keeps its brackets, so net.isIP never answers 6 here: settld lets every IPv6 literal pass
    ip_version = node_is_ip(hostname)
    if ip_version == 4 and not is_public_ipv4(hostname, allow_loopback=allow_loopback, allow_private=allow_private):
        return HOST_FORBIDDEN
    if ip_version == 6 and not is_public_ipv6(hostname, allow_loopback=allow_loopback, allow_private=allow_private):
        return HOST_FORBIDDEN
    return None
