"""docs/mcp.md's example runs as written: its server.py and agent.py, from an empty directory."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.mcp.mcp_support import REPO


def test_the_docs_example_runs(tmp_path: Path) -> None:
    page = (REPO / "docs" / "mcp.md").read_text()
    files = dict(re.findall(r"```python\n# (\w+\.py)\n(.*?)```", page, flags=re.S))
    assert set(files) == {"server.py", "agent.py"}, sorted(files)
    for name, body in files.items():
        (tmp_path / name).write_text(body)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FXD_")}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, "agent.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["{'deploy': 'unsafe', 'read_status': 'safe'}", "Deployed."]
