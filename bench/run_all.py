"""`make bench`: run every benchmark script in this folder, one after another, each in its own process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# ceiling.py (the framework ceiling) is not listed: http_load.py serves it in its rounds and reports against it.
BENCHES = ["append.py", "jobs_reduce.py", "dispatch.py", "dispatch_blocked.py", "artifacts.py", "deliver.py", "feed.py",
           "spool.py", "finance_export.py", "console.py", "http_load.py"]


def main() -> int:
    here = Path(__file__).resolve().parent
    failed = []
    for name in BENCHES:
        path = here / name
        if not path.exists():
            print(f"== {name}: not present, skipped")
            continue
        print(f"== {name}", flush=True)
        if subprocess.run([sys.executable, str(path)], cwd=here.parent).returncode != 0:
            failed.append(name)
    if failed:
        print(f"benchmarks that failed to run: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
