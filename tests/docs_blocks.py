"""The code blocks of README.md and every page under docs/, and how each is accounted for.

A shell block (```sh, ```bash, ```console) or a Python block (```python) is either

- preceded by ``<!-- tested: tests/path.py::test_name -->``: that test runs it (or what it
  shows), and the test file and function must exist;
- preceded by ``<!-- not-runnable: reason -->``: it cannot run here (the network, an AWS
  account, a process that serves until stopped), and the reason says why;
- or neither, and then ``tests/test_readme.py`` runs it verbatim.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"

SHELL = ("sh", "bash", "console")
PYTHON = ("python",)

_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```", re.M | re.S
)
_MARK = re.compile(
    r"<!--\s*(?P<kind>tested|not-runnable):\s*(?P<what>(?:(?!-->).)*?)\s*-->\s*\Z", re.S
)


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    body: str
    mark: str | None  # "tested", "not-runnable" or None (run verbatim)
    what: str  # the test named, or the reason

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def pages() -> list[Path]:
    """README.md and every Markdown page of the docs site."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def _dedent(body: str, indent: str) -> str:
    return "".join(
        line[len(indent) :] if line.startswith(indent) else line
        for line in body.splitlines(keepends=True)
    )


def blocks(page: Path, langs: tuple[str, ...] = SHELL + PYTHON) -> list[Block]:
    text = page.read_text()
    found = []
    for match in _FENCE.finditer(text):
        lang = match["lang"]
        if lang not in langs:
            continue
        before = text[: match.start()].rstrip()
        mark = _MARK.search(before[-1000:])
        found.append(
            Block(
                page=page,
                line=text.count("\n", 0, match.start()) + 1,
                lang=lang,
                body=_dedent(match["body"], match["indent"]),
                mark=mark["kind"] if mark else None,
                what=mark["what"] if mark else "",
            )
        )
    return found


def heading_section(page: Path, heading: str) -> str:
    """The text of ``page`` from ``heading`` (a whole line) to the next heading of its level."""
    text = page.read_text()
    level = heading.split(" ", 1)[0]
    start = text.index(f"\n{heading}\n")
    end = text.find(f"\n{level} ", start + len(heading) + 2)
    return text[start : end if end != -1 else len(text)]


def section_blocks(page: Path, heading: str, langs: tuple[str, ...]) -> list[str]:
    section = heading_section(page, heading)
    return [_dedent(m["body"], m["indent"]) for m in _FENCE.finditer(section) if m["lang"] in langs]
