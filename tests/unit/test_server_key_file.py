"""The server's signing key file, shared by every process of a deployment."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from settlekit.runtime.workers import load_server_signer


def test_processes_creating_the_server_key_at_once_all_get_the_one_key(tmp_path: Path) -> None:
    """`serve --workers N` (or several hosts on one file): every process that found no key file created one with
    O_EXCL, and all but the first died with FileExistsError. The key is now written whole under another name and
    linked in: everyone uses the key linked first, mode 0600, no file left behind."""
    path = tmp_path / "keys" / "server.pem"
    ids: list[str] = []
    threads = [threading.Thread(target=lambda: ids.append(load_server_signer(str(path)).key_id)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(ids) == 8 and len(set(ids)) == 1
    assert os.stat(path).st_mode & 0o777 == 0o600 and os.listdir(path.parent) == ["server.pem"]
    assert load_server_signer(str(path)).key_id == ids[0]
