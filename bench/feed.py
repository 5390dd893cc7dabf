"""Bounded benchmark of the event feed's Server-Sent Events on PostgreSQL (issue 14), under a minute.

A scratch database gets N events of one tenant (BENCH_FEED_EVENTS, default 10,000; a tenth as many of another
tenant interleaved). The anchor, measured in the same run: a raw paged SELECT of the same tenant's events (position,
type, envelope JSON; pages of 500) straight from the database, no gap walk. Then `settlekit serve --no-workers`
runs as a subprocess and the events are read from `GET /v1/events/stream` (limit 500) by one client, and by 50
clients at once (BENCH_FEED_CLIENTS): events/s delivered (all clients together), each as a ratio of the anchor.
Each phase stops at BENCH_FEED_PHASE_SECONDS (default 20) and reports what it got by then. Only 127.0.0.1 is
contacted; SIGTERM must end the server with the streams still open.

Run: python bench/feed.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import free_port, report, scratch_pg, stop_process, wait_ready  # noqa: E402
from settlekit.api.auth import create_api_key  # noqa: E402
from settlekit.append import Appender  # noqa: E402
from settlekit.store.db import Database, connect  # noqa: E402
from settlekit.store.feed import FeedRepository  # noqa: E402

N = int(os.environ.get("BENCH_FEED_EVENTS", "10000"))
CLIENTS = int(os.environ.get("BENCH_FEED_CLIENTS", "50"))
PHASE_SECONDS = float(os.environ.get("BENCH_FEED_PHASE_SECONDS", "20"))
PAGE = 500
TENANT, OTHER = "tenant_feed", "tenant_other"
ACTOR = {"type": "system", "id": "bench"}


def seed(db: Database) -> None:
    """N events of TENANT in batches of 100 per stream, with N/10 of OTHER in between."""
    store = Appender(db)
    for i in range(N // 100):
        items = [{"type": "BENCH_EVENT", "actor": ACTOR, "payload": {"i": i * 100 + j, "pad": "x" * 200}}
                 for j in range(100)]
        store.append(TENANT, f"s{i}", items, expected_version=0)
        store.append(OTHER, f"o{i}", items[:10], expected_version=0)


def raw_select_rate(db: Database) -> float:
    """Events/s of a plain paged SELECT of the tenant's events (the anchor)."""
    feed = FeedRepository(db)
    start = time.perf_counter()
    after, got = 0, 0
    while True:
        with db.query() as tx:
            page = feed.raw_page(tx, TENANT, after, PAGE)
        if not page:
            break
        got += len(page)
        after = page[-1].position
    return got / (time.perf_counter() - start)


def follow(base: str, headers: dict[str, str], want: int, deadline: float, counts: list[int], i: int) -> None:
    """Read one stream until `want` events came (or the deadline); counts[i] is how many."""
    with httpx.Client(base_url=base, headers=headers, timeout=30) as http, \
            http.stream("GET", "/v1/events/stream", params={"limit": PAGE}) as stream:
        pending = b""
        try:
            for chunk in stream.iter_raw():
                pending += chunk
                messages = pending.split(b"\n\n")
                pending = messages.pop()
                counts[i] += sum(1 for m in messages if m.startswith(b"id: "))
                if counts[i] >= want or time.monotonic() > deadline:
                    return
        except httpx.HTTPError:
            return  # the server went away


def sse_rate(base: str, headers: dict[str, str], clients: int) -> tuple[float, int]:
    """(events/s over every client together, events received) for `clients` concurrent streams from 0."""
    counts = [0] * clients
    deadline = time.monotonic() + PHASE_SECONDS
    threads = [threading.Thread(target=follow, args=(base, headers, N, deadline, counts, i)) for i in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - start), sum(counts)


def main() -> int:
    with scratch_pg("feed") as url, tempfile.TemporaryDirectory() as tmp:
        db = connect(url)
        db.migrate()
        seed(db)
        _, api_key = create_api_key(db, TENANT, ["jobs:read"])
        anchor = raw_select_rate(db)
        db.close()
        port = free_port()
        env = {**os.environ, "SETTLEKIT_DB": url, "SETTLEKIT_PORT": str(port), "SETTLEKIT_LOG_LEVEL": "WARNING",
               "SETTLEKIT_RATE_LIMIT_PER_SECOND": "1000000", "SETTLEKIT_RATE_LIMIT_BURST": "1000000",
               "SETTLEKIT_FEED_MAX_STREAMS_PER_TENANT": str(CLIENTS + 1)}
        log = Path(tmp) / "serve.log"
        server = subprocess.Popen([sys.executable, "-m", "settlekit.cli", "serve", "--no-workers"], env=env,
                                  stdout=log.open("wb"), stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            if not wait_ready(f"{base}/readyz", server, log):
                return 1
            headers = {"authorization": f"Bearer {api_key}"}
            report(f"raw paged SELECT of {N:,} events (anchor)", anchor, "events/s")
            one, got = sse_rate(base, headers, 1)
            report(f"SSE, 1 client ({got:,} events)", one, "events/s", anchor=anchor, anchor_name="raw SELECT")
            many, got = sse_rate(base, headers, CLIENTS)
            report(f"SSE, {CLIENTS} clients together ({got:,} events)", many, "events/s", anchor=anchor,
                   anchor_name="raw SELECT")
            report(f"SSE, per client of {CLIENTS}", many / CLIENTS, "events/s", anchor=anchor,
                   anchor_name="raw SELECT")
            # one stream left open (it waits for more): SIGTERM must still end the server
            idle = threading.Thread(target=follow, args=(base, headers, N + 1, time.monotonic() + 60, [0], 0),
                                    daemon=True)
            idle.start()
            time.sleep(1.0)
        finally:
            stop_process("serve", server, timeout=20)
        idle.join(5)
        print("the open stream ended with the server" if not idle.is_alive() else "an open stream outlived the server")
    return 0


if __name__ == "__main__":
    sys.exit(main())
