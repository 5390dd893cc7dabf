"""SSRF guard: classification, policies, URL checks, injected resolvers; no outbound traffic."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from settlekit.delivery.errors import DestinationForbiddenError
from settlekit.delivery.ssrf import (
    SsrfPolicy,
    avet_url,
    check_address,
    check_url,
    classify_address,
    embedded_ipv4,
    vet_url,
)

BLOCKED = {
    "0.0.0.0": "unspecified",
    "0.1.2.3": "unspecified",
    "10.1.2.3": "private",
    "100.64.0.1": "shared_address_space",
    "127.0.0.1": "loopback",
    "127.255.255.254": "loopback",
    "169.254.1.1": "link_local",
    "169.254.169.254": "metadata",
    "169.254.170.2": "metadata",
    "100.100.100.200": "metadata",
    "168.63.129.16": "metadata",
    "172.16.0.1": "private",
    "172.31.255.255": "private",
    "192.0.0.8": "ietf_protocol",
    "192.168.1.1": "private",
    "198.18.0.1": "benchmarking",
    "198.19.255.255": "benchmarking",
    "224.0.0.1": "multicast",
    "239.255.255.250": "multicast",
    "240.0.0.1": "reserved",
    "255.255.255.255": "broadcast",
    "192.0.2.10": "reserved",
    "::": "unspecified",
    "::1": "loopback",
    "fc00::1": "unique_local",
    "fd12:3456::1": "unique_local",
    "fd00:ec2::254": "metadata",
    "fe80::1": "link_local",
    "fe80::1%eth0": "link_local",
    "ff02::1": "multicast",
    "::ffff:127.0.0.1": "loopback",
    "::ffff:10.0.0.1": "private",
    "::ffff:169.254.169.254": "metadata",
    "::ffff:0:10.0.0.1": "private",  # IPv4-translated (RFC 2765)
    "::ffff:0:127.0.0.1": "loopback",
    "::ffff:0:a9fe:a9fe": "metadata",
    "64:ff9b::a9fe:a9fe": "metadata",
    "64:ff9b::7f00:1": "loopback",
    "64:ff9b:1::1": "nat64_local",
    "2002:c0a8:0101::1": "private",
    "::127.0.0.1": "loopback",
    "2001:db8::1": "reserved",
}
PUBLIC = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.216.34",
    "172.32.0.1",
    "100.128.0.1",
    "2606:4700:4700::1111",
    "::ffff:8.8.8.8",
    "64:ff9b::808:808",
    "2002:0808:0808::1",
]


@pytest.mark.parametrize(("ip", "category"), sorted(BLOCKED.items()))
def test_blocked_addresses(ip: str, category: str) -> None:
    assert classify_address(ip) == category
    with pytest.raises(DestinationForbiddenError) as exc:
        check_address(ip, SsrfPolicy())
    assert exc.value.code == "DESTINATION_URL_FORBIDDEN"
    assert exc.value.status == 400
    assert exc.value.details["category"] == category


@pytest.mark.parametrize("ip", PUBLIC)
def test_public_addresses(ip: str) -> None:
    assert classify_address(ip) is None
    check_address(ip, SsrfPolicy())


def test_embedded_ipv4() -> None:
    assert str(embedded_ipv4(__import__("ipaddress").ip_address("::ffff:1.2.3.4"))) == "1.2.3.4"
    assert embedded_ipv4(__import__("ipaddress").ip_address("2606:4700::1")) is None


def test_policy_allowances() -> None:
    loop = SsrfPolicy(allow_loopback=True)
    check_address("127.0.0.1", loop)
    check_address("::1", loop)
    check_address("::ffff:127.0.0.1", loop)
    with pytest.raises(DestinationForbiddenError):
        check_address("10.0.0.1", loop)

    private = SsrfPolicy(allow_private_network=True)
    for ip in ("10.0.0.1", "192.168.1.1", "fd12::1"):
        check_address(ip, private)
    for ip in ("169.254.169.254", "fd00:ec2::254", "::ffff:169.254.169.254", "127.0.0.1", "::1", "0.0.0.0",
               "169.254.1.1"):
        with pytest.raises(DestinationForbiddenError):
            check_address(ip, private)  # metadata stays blocked; loopback and link-local are not "private"

    listed = SsrfPolicy(allowed_networks=("10.20.0.0/16",))
    check_address("10.20.3.4", listed)
    check_address("::ffff:10.20.3.4", listed)
    with pytest.raises(DestinationForbiddenError):
        check_address("10.21.0.1", listed)

    broad = SsrfPolicy(allowed_networks=("169.254.0.0/16", "0.0.0.0/0", "::/0"))
    check_address("169.254.1.1", broad)
    for ip in ("169.254.169.254", "169.254.169.1", "169.254.170.2", "fd00:ec2::254", "fd00:ec2::1",
               "100.100.100.200", "168.63.129.16", "::ffff:169.254.169.254", "0.0.0.0", "224.0.0.1"):
        for pol in (broad, SsrfPolicy(allowed_networks=(f"{ip}/{32 if '.' in ip else 128}",)),
                    SsrfPolicy(allow_private_network=True, allow_loopback=True)):
            with pytest.raises(DestinationForbiddenError):
                check_address(ip, pol)  # metadata ranges stay blocked whatever the settings


def test_policy_is_hashable() -> None:
    assert hash(SsrfPolicy(allowed_networks=("10.0.0.0/8",))) == hash(
        SsrfPolicy(allowed_networks=("10.0.0.0/8",))
    )


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/x",
        "file:///etc/passwd",
        "gopher://example.com",
        "http://example.com/hook",  # plain http without allow_insecure_http
        "https://user:pw@example.com/hook",
        "https://user@example.com/hook",
        "https:///nohost",
        "https://127.0.0.1/hook",
        "https://[::1]:8443/hook",
        "https://169.254.169.254/latest/meta-data",
        "https://[::ffff:a9fe:a9fe]/",
        "https://0x7f000001/",
        "https://2130706433/",
        "https://127.1/",
        "https://0177.0.0.1/",
        "https://0x7f.0.0.1./",
        "http://[::ffff:0:10.0.0.1]/",
        "https://hooks.example.com:0/",
        "https://hooks.example.com:65536/",
        "https://93.184.216.34:99999/",
    ],
)
def test_check_url_refuses(url: str) -> None:
    with pytest.raises(DestinationForbiddenError):
        check_url(url, SsrfPolicy(allow_insecure_http=url.startswith("http://[")))


def test_check_url_accepts() -> None:
    d = check_url("https://hooks.example.com/in?x=1", SsrfPolicy())
    assert (d.scheme, d.host, d.port) == ("https", "hooks.example.com", 443)
    d = check_url("http://127.0.0.1:8080/", SsrfPolicy.for_local_testing())
    assert (d.host, d.port) == ("127.0.0.1", 8080)
    assert check_url("https://hooks.example.com:65535/", SsrfPolicy()).port == 65535
    assert check_url("https://hooks.example.com:1/", SsrfPolicy()).port == 1


def fake_resolver(table: dict[str, Sequence[str]]):  # type: ignore[no-untyped-def]
    def resolve(host: str, port: int) -> Sequence[str]:
        return table[host]

    return resolve


def test_vet_url_requires_every_address_to_pass() -> None:
    resolver = fake_resolver(
        {
            "ok.example": ["93.184.216.34", "2606:4700::1"],
            "mixed.example": ["93.184.216.34", "10.0.0.5"],
            "rebind.example": ["169.254.169.254"],
            "empty.example": [],
        }
    )
    v = vet_url("https://ok.example/hook", SsrfPolicy(), resolver=resolver)
    assert v.addresses == ("93.184.216.34", "2606:4700::1")
    for host in ("mixed.example", "rebind.example", "empty.example"):
        with pytest.raises(DestinationForbiddenError):
            vet_url(f"https://{host}/hook", SsrfPolicy(), resolver=resolver)
    vet_url("https://mixed.example/hook", SsrfPolicy(allow_private_network=True), resolver=resolver)


def test_a_host_name_is_refused_alike_whatever_it_resolves_to() -> None:
    """A name that does not resolve, has no addresses, or resolves to a private, loopback or metadata address gets
    one refusal: the tenant cannot map the deployment's internal DNS."""
    def resolver(host: str, port: int) -> Sequence[str]:
        return {"db.internal": ["10.1.2.3"], "lo.internal": ["127.0.0.1"], "meta.internal": ["169.254.169.254"],
                "empty.internal": []}[host]

    refusals = set()
    for host in ("db.internal", "lo.internal", "meta.internal", "empty.internal"):
        with pytest.raises(DestinationForbiddenError) as exc:
            vet_url(f"https://{host}/hook", SsrfPolicy(), resolver=resolver)
        refusals.add((exc.value.code, exc.value.message.replace(host, "H"), tuple(sorted(exc.value.details))))
    with pytest.raises(DestinationForbiddenError) as exc:
        vet_url("https://no-such-name.invalid/hook", SsrfPolicy())  # the system resolver: does not resolve
    refusals.add((exc.value.code, exc.value.message.replace("no-such-name.invalid", "H"),
                  tuple(sorted(exc.value.details))))
    assert refusals == {("DESTINATION_URL_FORBIDDEN", "destination host 'H' does not resolve to addresses deliveries "
                         "may reach", ("host", "reason", "url"))}


def test_localhost_resolves_to_loopback_and_is_refused() -> None:
    with pytest.raises(DestinationForbiddenError) as exc:
        vet_url("https://localhost/hook", SsrfPolicy())
    assert exc.value.message == "destination host 'localhost' does not resolve to addresses deliveries may reach"
    assert vet_url("http://localhost:9/", SsrfPolicy.for_local_testing()).addresses


def test_async_vet_url() -> None:
    async def resolver(host: str, port: int) -> Sequence[str]:
        return ["fd00:ec2::254"]

    with pytest.raises(DestinationForbiddenError) as exc:
        asyncio.run(
            avet_url("https://meta.example/", SsrfPolicy(allow_private_network=True), resolver=resolver)
        )
    assert exc.value.details == {"host": "meta.example", "url": "https://meta.example/", "reason": "ssrf_blocked"}
