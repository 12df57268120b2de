"""No tracked file keeps a merge's conflict markers: ``mkdocs build --strict`` renders them as
text, Python would not import them, but a Markdown page or a YAML comment shows them to users
(docs/providers.md did, for a session)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# A conflict's three lines, each at the start of a line: "<<<<<<< ours", "=======",
# ">>>>>>> theirs". Markdown's setext headings underline with "=" too, so "=======" alone is
# only counted inside a conflict that opened with "<<<<<<< ".
_OPEN = re.compile(r"^<<<<<<< \S", re.M)
_CLOSE = re.compile(r"^>>>>>>> \S", re.M)


def tracked_text_files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    paths = [REPO / name for name in out.split("\0") if name]
    return [p for p in paths if p.is_file() and b"\0" not in p.read_bytes()[:4096]]


def test_no_tracked_file_has_conflict_markers() -> None:
    files = tracked_text_files()
    assert len(files) > 100, "git ls-files found too few files: the check would prove nothing"
    left = [
        str(p.relative_to(REPO))
        for p in files
        if _OPEN.search(text := p.read_text(errors="replace")) or _CLOSE.search(text)
    ]
    assert left == [], f"merge conflict markers left in: {left}"
