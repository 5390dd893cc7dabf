"""The shared metrics directories of `serve --workers N`: one left by a killed serve is removed at the next start;
one whose serve still runs is kept."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from settlekit.metrics import SHARED_DIR_PREFIX, remove_stale_shared_dirs, shared_dir_prefix


def _gone_pid() -> int:
    """The pid of a process that has exited."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    return int(done.stdout)


def test_a_killed_serves_directory_is_removed_and_a_running_ones_kept(tmp_path: Path) -> None:
    stale = tmp_path / f"{SHARED_DIR_PREFIX}{_gone_pid()}-x1"
    (stale / "sub").mkdir(parents=True)
    (stale / "counter_1.db").write_bytes(b"\0" * 16)
    running = tmp_path / f"{shared_dir_prefix()}x2"
    running.mkdir()
    other = tmp_path / "settlekit-metrics-notapid"
    other.mkdir()
    assert remove_stale_shared_dirs(str(tmp_path)) == [str(stale)]
    assert not stale.exists() and running.exists() and other.exists()
    assert shared_dir_prefix() == f"{SHARED_DIR_PREFIX}{os.getpid()}-"
