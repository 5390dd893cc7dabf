"""The sender over TLS on loopback (its own asyncio network backend): a receiver whose certificate the sender trusts
is reached, keep-alive connections are reused; an untrusted certificate, and a peer that never completes the
handshake, end as network errors and timeouts, never as an exception."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from settlekit.delivery.message import PreparedRequest
from settlekit.delivery.retry import NETWORK_ERROR, TIMEOUT
from settlekit.delivery.sender import SenderConfig, WebhookSender
from settlekit.delivery.ssrf import SsrfPolicy
from support.endpoints import BlackHole

LOCAL = SsrfPolicy(allow_loopback=True, allow_insecure_http=False)


def _certificate(tmp: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


class TlsReceiver:
    """An HTTPS/1.1 server on 127.0.0.1 answering 200 with a small body; counts connections and requests."""

    def __init__(self, cert: Path, key: Path):
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(cert, key)
        self.connections = 0
        self.requests = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length"))
                    await reader.readexactly(length)
                    self.requests += 1
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
                pass
            finally:
                writer.close()

        async def start() -> None:
            server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=self.context)
            self.port = server.sockets[0].getsockname()[1]
            self._ready.set()

        self._loop.run_until_complete(start())
        self._loop.run_forever()

    def __enter__(self) -> TlsReceiver:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


@pytest.fixture
def tls(tmp_path: Path) -> Iterator[tuple[TlsReceiver, Path]]:
    cert, key = _certificate(tmp_path)
    with TlsReceiver(cert, key) as server:
        yield server, cert


def _request(url: str) -> PreparedRequest:
    return PreparedRequest(url=url, headers={"content-type": "application/json"}, body=b'{"a":1}', policy=LOCAL,
                           pool="d1")


def test_a_trusted_receiver_is_reached_over_tls_on_one_kept_alive_connection(
        tls: tuple[TlsReceiver, Path]) -> None:
    server, cert = tls
    trusted = ssl.create_default_context(cafile=str(cert))

    async def go() -> list[tuple[int | None, str | None]]:
        async with WebhookSender(SenderConfig(timeout=5.0, verify=trusted)) as sender:
            return [((o := await sender.send(_request(f"https://127.0.0.1:{server.port}/hook"))).status, o.error)
                    for _ in range(3)]

    assert asyncio.run(go()) == [(200, None)] * 3
    assert (server.connections, server.requests) == (1, 3)


def test_an_untrusted_certificate_is_a_network_error(tls: tuple[TlsReceiver, Path]) -> None:
    server, _ = tls

    async def go() -> tuple[int | None, str | None, str | None]:
        async with WebhookSender(SenderConfig(timeout=5.0)) as sender:
            out = await sender.send(_request(f"https://127.0.0.1:{server.port}/hook"))
            return out.status, out.error, out.error_message

    status, error, message = asyncio.run(go())
    assert (status, error) == (None, NETWORK_ERROR) and "CERTIFICATE_VERIFY_FAILED" in (message or ""), message
    assert server.requests == 0


def test_a_peer_that_never_completes_the_handshake_times_out() -> None:
    with BlackHole() as hole:
        url = hole.url.replace("http://", "https://")

        async def go() -> tuple[int | None, str | None, float]:
            async with WebhookSender(SenderConfig(timeout=1.0, connect_timeout=0.5)) as sender:
                out = await sender.send(_request(url))
                return out.status, out.error, out.duration_ms

        status, error, duration = asyncio.run(go())
    assert (status, error) == (None, TIMEOUT) and duration < 5000


def test_pools_left_idle_past_the_keepalive_expiry_are_closed(tls: tuple[TlsReceiver, Path]) -> None:
    """httpcore drops an expired keep-alive connection only when its pool is used again: the sender closes whole
    pools (one per destination) that nothing used for longer than the expiry, so idle destinations hold no
    sockets."""
    server, cert = tls
    trusted = ssl.create_default_context(cafile=str(cert))

    async def go() -> tuple[int, int]:
        async with WebhookSender(SenderConfig(timeout=5.0, verify=trusted, keepalive_expiry=0.2)) as sender:
            url = f"https://127.0.0.1:{server.port}/hook"
            for pool in ("d1", "d2", "d3"):
                out = await sender.send(PreparedRequest(url=url, headers={}, body=b"{}", policy=LOCAL, pool=pool))
                assert out.status == 200
            before = len(sender._pools)
            await asyncio.sleep(0.5)
            assert (await sender.send(_request(url))).status == 200  # pool d1 again: the idle others are closed
            await asyncio.sleep(0.05)
            return before, len(sender._pools)

    assert asyncio.run(go()) == (3, 1)
