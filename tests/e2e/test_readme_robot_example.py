"""The README's robot example is the code of examples/robot_job.py (between its `README:` markers), and that code
reports a job end to end against the API: the job ends COMPLETED, every event of the stream verifies."""

from __future__ import annotations

import importlib.util
import re
import textwrap
from pathlib import Path
from types import ModuleType

from settlekit.client import Client
from settlekit.events.envelope import verify_chain
from settlekit.store.db import Database
from support.api import TENANT_A, key_for, make_app
from support.http_server import serve

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "robot_job.py"


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("robot_job_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _robot_section() -> str:
    text = EXAMPLE.read_text(encoding="utf-8")
    section = text.split("# --- README: robot\n", 1)[1].split("    # --- README: end\n", 1)[0]
    return textwrap.dedent(section).strip()


def test_the_readme_shows_the_example_code() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"<!-- example: examples/robot_job.py -->\n```python\n(.*?)```", readme, re.S)
    assert blocks, "the README's robot example block is missing"
    assert blocks[0].strip() == _robot_section(), "paste examples/robot_job.py's README section into the README"
    assert len(_robot_section().splitlines()) <= 25


def test_the_example_reports_a_job_end_to_end(db: Database, tmp_path: Path) -> None:
    app = make_app(db)
    server = app.state.settlekit.appender.server_signer
    with serve(app) as url:
        key = key_for(db, TENANT_A)
        status = _example().robot_reports(url, key, "job_readme", str(tmp_path / "rob_7.spool"))
        with Client(url, key) as api:
            events = api.export_job("job_readme")
            keys = {k["keyId"]: k["publicKeyPem"] for k in api.list_keys()["keys"]}
    assert status == "COMPLETED"
    verify_chain(events, {**keys, server.key_id: server.public_key_pem})
    robot_events = [e for e in events if e["actor"]["type"] == "robot"]
    assert [e["type"] for e in robot_events][-1] == "EXECUTION_COMPLETED" and len(robot_events) == 7
    assert all(e["signature"] for e in robot_events)
