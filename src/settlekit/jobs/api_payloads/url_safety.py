"""settld's synchronous URL safety check (core/url-safety.js `checkUrlSafetySync`), as evidence refs use it.

URLs are parsed by Ada, the WHATWG URL parser node's `new URL` is built on: ada-url 1.15.3 bundles Ada 2.9.2,
node 20's own (later Ada releases accept and refuse other hosts).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Final

import ada_url

from settlekit.events.js import js_usv_string
from settlekit.jobs.api_payloads._js import js_trim, non_empty_string

INVALID_URL: Final = "URL_INVALID"
SCHEME_FORBIDDEN: Final = "URL_SCHEME_FORBIDDEN"
USERINFO_FORBIDDEN: Final = "URL_USERINFO_FORBIDDEN"
HOST_FORBIDDEN: Final = "URL_HOST_FORBIDDEN"

DEFAULT_ALLOWED_SCHEMES: Final = ("https", "s3", "gcs", "gs", "minio", "obj")
# schemes naming object-store refs: accepted once they parse, with no host checks
_OPAQUE_SCHEMES: Final = frozenset({"obj", "s3", "gcs", "gs", "minio"})
_METADATA_HOSTNAMES: Final = frozenset({"metadata.google.internal", "metadata.azure.internal"})

# A dotted quad of decimal octets without leading zeros: what `net.isIP` answers 4 for.
_OCTET: Final = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_DOTTED_QUAD: Final = re.compile(rf"(?:{_OCTET}\.){{3}}{_OCTET}")
_DIGITS: Final = re.compile("[0-9]+")
_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")


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


def _as_usv_string(s: str) -> str:
    """What node hands its URL parser: surrogate pairs joined, lone surrogates replaced by U+FFFD."""
    if not _LONE_SURROGATE.search(s):
        return s
    return js_usv_string(s)


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

    # WHATWG writes an IPv4 host as a dotted quad and keeps an IPv6 host's brackets, so `net.isIP` answers 4 for
    # the former and 0 for the latter: settld's IPv6 address rules are never reached and every IPv6 literal passes.
    if _DOTTED_QUAD.fullmatch(hostname) and not is_public_ipv4(
        hostname, allow_loopback=allow_loopback, allow_private=allow_private
    ):
        return HOST_FORBIDDEN
    return None
