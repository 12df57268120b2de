"""The example projects' READMEs and ``docs/examples.md`` say the same thing and every command
in them is accounted for: each ``sh`` block is marked ``tested`` (by a test that exists and
runs it, from the README) or ``not-runnable`` (with the reason), and the page's blocks are the
READMEs' own, marker and all, so the page cannot show a command the tests do not run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from examples_support import DOCS_PAGE, REPO

# The projects with a README and tests here; the coding agent and the Lambda project have
# pages (and tests) of their own.
PROJECTS = (
    "real_provider_agent",
    "starlette_app",
    "rq_workers",
    "mcp_project",
    "pydantic_ai_project",
    "langchain_project",
    "openai_agents_project",
)
_SH_BLOCK = re.compile(r"(?:<!-- ([^\n]*?) -->\n)?```sh\n(.*?)```", flags=re.S)
_MARKER = re.compile(r"(tested|not-runnable): (.+)")


def sh_blocks(path: Path) -> list[tuple[str, str]]:
    """(the marker line's text or "", the block) for every ``sh`` block of ``path``."""
    return _SH_BLOCK.findall(path.read_text())


def pages() -> list[Path]:
    return [DOCS_PAGE, *(REPO / "examples" / p / "README.md" for p in PROJECTS)]


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_shell_block_is_tested_or_says_why_not(page: Path) -> None:
    blocks = sh_blocks(page)
    assert blocks, f"{page} shows no commands"
    for marker, body in blocks:
        found = _MARKER.fullmatch(marker)
        assert found, f"{page.name}: a block without a tested/not-runnable marker:\n{body}"
        kind, what = found.groups()
        if kind == "not-runnable":
            assert len(what.split()) >= 3, f"{page.name}: say why it is not runnable: {what!r}"
            continue
        path, _, name = what.partition("::")
        test_file = REPO / path
        assert test_file.is_file(), f"{page.name}: {path} does not exist"
        assert re.search(rf"^def {re.escape(name)}\(", test_file.read_text(), flags=re.M), (
            f"{page.name}: {path} has no test {name}"
        )


def test_the_docs_page_shows_the_readmes_blocks_verbatim() -> None:
    readmes = [REPO / "examples" / project / "README.md" for project in PROJECTS]
    in_readmes = {block for readme in readmes for block in sh_blocks(readme)}
    shown = sh_blocks(DOCS_PAGE)
    for block in shown:
        assert block in in_readmes, f"docs/examples.md shows a block no README has:\n{block[1]}"
    page = DOCS_PAGE.read_text()
    for project in PROJECTS:
        assert f"`examples/{project}/`" in page, f"docs/examples.md does not list {project}"
    tested_in_readmes = {b for b in in_readmes if b[0].startswith("tested:")}
    assert tested_in_readmes <= set(shown), "docs/examples.md leaves out a tested README block"
