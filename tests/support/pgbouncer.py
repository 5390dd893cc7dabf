"""A PgBouncer started by a test (no tests here): Debian's `pgbouncer` with a generated configuration on a free
loopback port, in transaction pooling mode. Without the program the test skips, unless SETTLEKIT_REQUIRE_PG is set
(CI), where it fails (`.ci/install-pgbouncer` installs it)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from conftest import REQUIRE_PG
from support.multiprocess import free_port


def pgbouncer_program() -> str:
    found = shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(p, os.X_OK)), None)
    if found is None:
        message = "pgbouncer is not installed (Debian: apt-get install pgbouncer)"
        if REQUIRE_PG:
            pytest.fail(f"SETTLEKIT_REQUIRE_PG is set but {message}", pytrace=False)
        pytest.skip(message)
    return found


@contextlib.contextmanager
def pgbouncer(target_url: str, *, target_port: int | None = None,
              settings: dict[str, str] | None = None) -> Iterator[int]:
    """A pgbouncer in transaction pooling mode in front of the server of `target_url` (any database on it, at
    `target_port` instead of the URL's when given, such as a TCP proxy's), with its default timeouts unless
    `settings` (pgbouncer.ini's [pgbouncer] options) says otherwise; yields its port."""
    program = pgbouncer_program()
    target = urlsplit(target_url)
    user = target.username or "postgres"
    port = free_port()
    # not under pytest's private tmp_path: pgbouncer drops root to the postgres user, who must read the files
    folder = Path(tempfile.mkdtemp(prefix="settlekit-pgbouncer-"))
    folder.chmod(0o755)
    users = folder / "userlist.txt"
    users.write_text(f'"{user}" ""\n', encoding="utf-8")
    config = folder / "pgbouncer.ini"
    config.write_text("\n".join([
        "[databases]",
        f"* = host={target.hostname or '127.0.0.1'} port={target_port or target.port or 5432}",
        "[pgbouncer]",
        "listen_addr = 127.0.0.1",
        f"listen_port = {port}",
        "unix_socket_dir =",
        "auth_type = trust",
        f"auth_file = {users}",
        f"admin_users = {user}",
        "pool_mode = transaction",
        # fewer server connections than clients: transactions of different processes share them
        "default_pool_size = 8",
        "reserve_pool_size = 4",
        "max_client_conn = 400",
        "ignore_startup_parameters = extra_float_digits,options",
        *(f"{name} = {value}" for name, value in (settings or {}).items()),
        "",
    ]), encoding="utf-8")
    for path in (users, config):
        path.chmod(0o644)
    log = folder / "pgbouncer.log"
    command = [program, *(["-u", "postgres"] if os.geteuid() == 0 else []), str(config)]
    with log.open("wb") as handle:
        proc = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 15
        while True:
            if proc.poll() is not None:
                pytest.fail(f"pgbouncer exited at start: {log.read_text(errors='replace')[-2000:]}")
            try:
                with psycopg.connect(f"postgresql://{user}@127.0.0.1:{port}/{target.path.lstrip('/') or user}",
                                     connect_timeout=2, prepare_threshold=None) as conn:
                    conn.execute("SELECT 1")
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(folder, ignore_errors=True)


def pooled(url: str, port: int) -> str:
    """`url`'s database through the pooler at `port`."""
    target = urlsplit(url)
    return f"postgresql://{target.username or 'postgres'}@127.0.0.1:{port}{target.path}"
