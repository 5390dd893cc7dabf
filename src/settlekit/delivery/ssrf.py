"""SSRF guard for webhook destinations (spec 06 §9).

A URL passes when its scheme is https (http only with `allow_insecure_http`), it has no userinfo, its port (if
given) is 1 to 65535, and **every** address its host resolves to is outside the blocked ranges. IPv4-mapped,
IPv4-translated, IPv4-compatible, NAT64 and 6to4 IPv6 forms are judged by the IPv4 address they embed. The refusal
of a host name is the same whether it does not resolve or resolves to a blocked address (the log says which): a
tenant learns nothing of the deployment's internal names. What the deployment may lift:

- `allow_private_network` (deployment `SETTLEKIT_ALLOW_PRIVATE_WEBHOOKS` and the destination's own opt-in):
  private, unique-local, shared and other special-purpose unicast ranges; not loopback, not link-local;
- `allowed_networks` (`SETTLEKIT_ALLOWED_WEBHOOK_NETWORKS`): the listed CIDRs, loopback and link-local included;
- `allow_loopback` (development and tests): loopback.

Cloud metadata ranges (169.254.169.0/24, 169.254.170.0/24, fd00:ec2::/32, 100.100.100.200, 168.63.129.16),
unspecified, multicast and broadcast addresses stay blocked whatever the settings.

`GuardedBackend` applies the same check when a connection is opened and connects to the vetted address while
the URL (and so TLS SNI, certificate check and Host header) keeps the hostname: DNS rebinding cannot switch
the target between check and connect.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import httpcore
import httpx

from settlekit.delivery.errors import DestinationForbiddenError
from settlekit.delivery.netstream import AsyncioBackend

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network

# (network, category), first match wins; categories are reported in errors.
_BLOCKED_V4: Final[tuple[tuple[IPNetwork, str], ...]] = (
    (_V4("0.0.0.0/8"), "unspecified"),
    (_V4("10.0.0.0/8"), "private"),
    (_V4("100.64.0.0/10"), "shared_address_space"),
    (_V4("127.0.0.0/8"), "loopback"),
    (_V4("169.254.0.0/16"), "link_local"),
    (_V4("172.16.0.0/12"), "private"),
    (_V4("192.0.0.0/24"), "ietf_protocol"),
    (_V4("192.168.0.0/16"), "private"),
    (_V4("198.18.0.0/15"), "benchmarking"),
    (_V4("224.0.0.0/4"), "multicast"),
    (_V4("255.255.255.255/32"), "broadcast"),
    (_V4("240.0.0.0/4"), "reserved"),
)
_BLOCKED_V6: Final[tuple[tuple[IPNetwork, str], ...]] = (
    (_V6("::/128"), "unspecified"),
    (_V6("::1/128"), "loopback"),
    (_V6("fc00::/7"), "unique_local"),
    (_V6("fe80::/10"), "link_local"),
    (_V6("fec0::/10"), "site_local"),
    (_V6("ff00::/8"), "multicast"),
    (_V6("64:ff9b:1::/48"), "nat64_local"),
    (_V6("100::/64"), "discard"),
)

# Instance metadata and other cloud-internal service addresses.
log = logging.getLogger("settlekit.delivery.ssrf")

METADATA_ADDRESSES: Final[frozenset[IPAddress]] = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, Oracle, DigitalOcean
        "169.254.169.253",  # AWS DNS
        "169.254.169.123",  # AWS time sync
        "169.254.170.2",  # AWS ECS task metadata
        "169.254.170.23",  # AWS EKS pod identity
        "100.100.100.200",  # Alibaba Cloud
        "168.63.129.16",  # Azure wire server (a public-range address)
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "fd00:ec2::253",
        "fd00:ec2::123",
        "fd00:ec2::23",
    )
)

# Whole ranges used by cloud metadata services (checked before the tables above).
METADATA_NETWORKS: Final[tuple[IPNetwork, ...]] = (
    _V4("169.254.169.0/24"),
    _V4("169.254.170.0/24"),
    _V6("fd00:ec2::/32"),
)
# Never reachable, whatever the policy.
NEVER_ALLOWED: Final = frozenset({"metadata", "unspecified", "multicast", "broadcast"})
# Lifted only by an explicit allowed_networks entry (or allow_loopback for loopback).
_NOT_BY_PRIVATE_FLAG: Final = frozenset({"loopback", "link_local"})

_MAPPED: Final = _V6("::ffff:0:0/96")
_TRANSLATED: Final = _V6("::ffff:0:0:0/96")  # RFC 2765 (SIIT) IPv4-translated
_COMPAT: Final = _V6("::/96")
_NAT64: Final = _V6("64:ff9b::/96")
_SIX_TO_FOUR: Final = _V6("2002::/16")


@dataclass(frozen=True)
class SsrfPolicy:
    """What a destination may reach. Hashable, so a sender can keep one connection pool per policy."""

    allow_insecure_http: bool = False
    allow_private_network: bool = False
    allow_loopback: bool = False
    allowed_networks: tuple[IPNetwork, ...] = field(default=())

    def __post_init__(self) -> None:
        nets = tuple(ipaddress.ip_network(n, strict=False) for n in self.allowed_networks)
        object.__setattr__(self, "allowed_networks", nets)

    @classmethod
    def for_destination(cls, *, tenant_opt_in: bool, allow_private_network: bool = False,
                        allowed_networks: Iterable[str | IPNetwork] = (), allow_loopback: bool = False,
                        allow_insecure_http: bool = False) -> SsrfPolicy:
        """A destination's policy: private delivery is the deployment's decision (`allow_private_network`,
        `allowed_networks`); the destination's `allowPrivateNetwork` opt-in can only narrow it (without the
        opt-in neither applies), never widen it."""
        return cls(
            allow_insecure_http=allow_insecure_http,
            allow_private_network=allow_private_network and tenant_opt_in,
            allow_loopback=allow_loopback,
            allowed_networks=tuple(ipaddress.ip_network(n, strict=False) for n in allowed_networks)
            if tenant_opt_in else (),
        )

    @classmethod
    def for_local_testing(cls) -> SsrfPolicy:
        """http and loopback allowed: for tests and local receivers only."""
        return cls(allow_insecure_http=True, allow_loopback=True)


def embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address carried by an IPv4-mapped, IPv4-translated, IPv4-compatible, NAT64 or 6to4 IPv6
    address."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    n = int(ip)
    if ip in _MAPPED or ip in _TRANSLATED or ip in _NAT64:
        return ipaddress.IPv4Address(n & 0xFFFFFFFF)
    if ip in _COMPAT and n > 1:
        return ipaddress.IPv4Address(n & 0xFFFFFFFF)
    if ip in _SIX_TO_FOUR:
        return ipaddress.IPv4Address((n >> 80) & 0xFFFFFFFF)
    return None


def _parse_ip(ip: str | IPAddress) -> IPAddress:
    if isinstance(ip, str):
        return ipaddress.ip_address(ip.split("%", 1)[0])  # drop an IPv6 zone id
    return ip


def classify_address(ip: str | IPAddress) -> str | None:
    """Category name of a blocked address (`loopback`, `private`, `metadata`, …) or None for a public one."""
    addr = _parse_ip(ip)
    if addr in METADATA_ADDRESSES or any(addr.version == n.version and addr in n for n in METADATA_NETWORKS):
        return "metadata"
    inner = embedded_ipv4(addr)
    if inner is not None:
        category = classify_address(inner)
        return category if category is not None else None
    table = _BLOCKED_V4 if isinstance(addr, ipaddress.IPv4Address) else _BLOCKED_V6
    for net, category in table:
        if addr in net:
            return category
    if not addr.is_global:
        return "reserved"  # documentation and other special-purpose ranges
    return None


def _in_any(addr: IPAddress, nets: Iterable[IPNetwork]) -> bool:
    return any(addr.version == n.version and addr in n for n in nets)


def check_address(ip: str | IPAddress, policy: SsrfPolicy, *, url: str | None = None) -> None:
    """Raise DestinationForbiddenError unless `policy` lets a request reach `ip`."""
    addr = _parse_ip(ip)
    category = classify_address(addr)
    if category is None:
        return
    inner = embedded_ipv4(addr)
    candidates = [addr] if inner is None else [addr, inner]
    if category not in NEVER_ALLOWED and (
        (policy.allow_private_network and category not in _NOT_BY_PRIVATE_FLAG)
        or (category == "loopback" and policy.allow_loopback)
        or any(_in_any(a, policy.allowed_networks) for a in candidates)
    ):
        return
    raise DestinationForbiddenError(
        f"destination address {addr} is {category.replace('_', ' ')}",
        reason="ssrf_blocked",
        address=str(addr),
        category=category,
        url=url,
    )


@dataclass(frozen=True)
class ParsedDestination:
    url: str
    scheme: str
    host: str
    port: int


@dataclass(frozen=True)
class VettedDestination:
    url: str
    host: str
    port: int
    addresses: tuple[str, ...]


def _forbidden(message: str, url: str, **details: Any) -> DestinationForbiddenError:
    return DestinationForbiddenError(message, reason="ssrf_blocked", url=url, **details)


def check_url(url: str, policy: SsrfPolicy) -> ParsedDestination:
    """Static checks (no DNS): scheme, userinfo, host; an IP-literal host is checked against the ranges.

    Parsed with httpx, the same parser the sender uses, so the checked host is the host connected to.
    """
    try:
        u = httpx.URL(url)
        host = u.host  # decodes an `xn--` label: a bad one raises here (idna.IDNAError is a ValueError)
        given_port = u.port
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise _forbidden("destination URL is not valid", url) from exc
    scheme = u.scheme
    if scheme not in ("http", "https"):
        raise _forbidden(f"destination scheme {scheme!r} is not allowed", url, scheme=scheme)
    if scheme == "http" and not policy.allow_insecure_http:
        raise _forbidden("plain http destinations need allow_insecure_http", url, scheme=scheme)
    if u.userinfo:
        raise _forbidden("destination URL must not contain userinfo", url)
    if not host:
        raise _forbidden("destination URL has no host", url)
    if given_port is not None and not 1 <= given_port <= 65535:
        raise _forbidden("destination port must be 1 to 65535", url, port=given_port)
    port = given_port or (443 if scheme == "https" else 80)
    if _NUMERIC_HOST.fullmatch(host) and not _is_ip_literal(host):
        # inet_aton shorthands (0x7f000001, 2130706433, 127.1, 0177.0.0.1) resolve to addresses the
        # static check cannot see; refuse them instead of trusting the resolver to agree with us
        raise _forbidden("numeric host is not a dotted-quad IPv4 address", url, host=host)
    if _is_ip_literal(host):
        check_address(host, policy, url=url)
    return ParsedDestination(url=url, scheme=scheme, host=host, port=port)


_NUMERIC_HOST: Final = re.compile(r"(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+)){0,3}\.?", re.IGNORECASE)


def _is_ip_literal(host: str) -> bool:
    try:
        _parse_ip(host)
    except ValueError:
        return False
    return True


Resolver = Callable[[str, int], Sequence[str]]
AsyncResolver = Callable[[str, int], Awaitable[Sequence[str]]]


def _addresses_from_getaddrinfo(infos: Iterable[tuple[object, ...]]) -> list[str]:
    out: list[str] = []
    for info in infos:
        sockaddr = info[4]
        assert isinstance(sockaddr, tuple)
        ip = str(sockaddr[0])
        if ip not in out:
            out.append(ip)
    return out


def system_resolve(host: str, port: int) -> list[str]:
    """All A/AAAA addresses of `host` (blocking); none when it does not resolve (logged)."""
    if _is_ip_literal(host):
        return [host]
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:  # UnicodeError: a label the resolver cannot encode (empty, long)
        log.info("destination host %r does not resolve: %s", host, exc)
        return []
    return _addresses_from_getaddrinfo(infos)


async def async_system_resolve(host: str, port: int) -> list[str]:
    if _is_ip_literal(host):
        return [host]
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return _addresses_from_getaddrinfo(infos)


def _unreachable_name(url: str, host: str) -> DestinationForbiddenError:
    """The one refusal of a host name, whatever the reason: it does not resolve, has no addresses, or resolves to a
    blocked one. A tenant must not learn what an internal name resolves to, nor whether it resolves at all."""
    return _forbidden(f"destination host {host!r} does not resolve to addresses deliveries may reach", url,
                      host=host)


def _check_all(url: str, host: str, addresses: Sequence[str], policy: SsrfPolicy) -> tuple[str, ...]:
    """Every address of `host` must pass. A host name is refused with `_unreachable_name`; the log says why."""
    named = not _is_ip_literal(host)
    if not addresses:
        log.info("destination host %r refused: no addresses", host)
        raise _unreachable_name(url, host)
    for a in addresses:
        try:
            check_address(a, policy, url=url)
        except DestinationForbiddenError as exc:
            if not named:
                raise
            log.info("destination host %r refused: %s", host, exc.message)
            raise _unreachable_name(url, host) from None
    return tuple(addresses)


def vet_url(url: str, policy: SsrfPolicy, *, resolver: Resolver | None = None) -> VettedDestination:
    """Static checks, then resolve and require every address to pass (used when a destination is saved)."""
    d = check_url(url, policy)
    addresses = (resolver or system_resolve)(d.host, d.port)
    return VettedDestination(url, d.host, d.port, _check_all(url, d.host, addresses, policy))


async def avet_url(
    url: str, policy: SsrfPolicy, *, resolver: AsyncResolver | None = None
) -> VettedDestination:
    d = check_url(url, policy)
    try:
        addresses = await (resolver or async_system_resolve)(d.host, d.port)
    except (OSError, UnicodeError) as exc:
        log.info("destination host %r does not resolve: %s", d.host, exc)
        addresses = []
    return VettedDestination(url, d.host, d.port, _check_all(url, d.host, addresses, policy))


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore network backend that resolves, vets and connects to the vetted addresses only."""

    def __init__(
        self,
        policy: SsrfPolicy,
        *,
        resolver: AsyncResolver | None = None,
        inner: httpcore.AsyncNetworkBackend | None = None,
    ):
        self.policy = policy
        self._resolve = resolver or async_system_resolve
        self._inner = inner or AsyncioBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            addresses = await asyncio.wait_for(self._resolve(host, port), timeout)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"resolving {host} timed out") from exc
        except (OSError, UnicodeError) as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
        vetted = _check_all(f"{host}:{port}", host, addresses, self.policy)
        last: Exception | None = None
        for ip in vetted:
            try:
                return await self._inner.connect_tcp(
                    ip, port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        assert last is not None
        raise last

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise DestinationForbiddenError("unix socket destinations are not allowed", reason="ssrf_blocked")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)
