"""docs/providers.md: every shell block is marked tested or not runnable, and the tested one
runs verbatim (bash, the test venv's ``python`` first on PATH) and prints what the page says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "providers.md"
BLOCK = re.compile(r"(?:<!-- (?P<mark>[^>]*) -->\n)?```sh\n(?P<body>.*?)```", re.DOTALL)


def _blocks() -> list[tuple[str | None, str]]:
    return [(m["mark"], m["body"]) for m in BLOCK.finditer(PAGE.read_text())]


def test_every_shell_block_is_marked() -> None:
    blocks = _blocks()
    assert len(blocks) >= 6
    for mark, body in blocks:
        assert mark is not None and mark.startswith(("tested: ", "not-runnable: ")), body


def test_the_docs_check_of_where_a_model_points(tmp_path: Path) -> None:
    name = "tests/models/test_provider_docs.py::test_the_docs_check_of_where_a_model_points"
    (body,) = [body for mark, body in _blocks() if mark == f"tested: {name}"]
    promised = re.search(r"It prints `([^`]+)`", PAGE.read_text())
    assert promised is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FXD_", "OPENAI_"))}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    done = subprocess.run(
        ["bash", "-c", body], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == promised.group(1)
