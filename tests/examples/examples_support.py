"""Running ``examples/<name>/`` as a user does: the example's files copied into an empty
directory, the built wheel installed in a fresh venv (``wheel_support.wheel_venv``), and the
commands its README shows run there, verbatim, with that venv first on ``PATH`` (an
activated venv).

The commands come from the README itself: the ``sh`` block after a marker line
``<!-- tested: tests/examples/<file>.py::<test> -->`` is the block that test runs, so the
README and the test cannot drift apart. ``docs/examples.md`` shows the same blocks under the
same markers; :func:`docs_blocks` reads them for the check that they match.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from wheel_support import REPO, Venv, clean_env, wheel_venv

# One venv for every example test (and the other wheel tests of the same process that ask
# for these extras): each venv costs 20-50 s to make. The real-provider agent needs no
# extra; the extras only add packages it does not import.
EXTRAS = "http,redis"

__all__ = [
    "DOCS_PAGE",
    "EXTRAS",
    "REPO",
    "Ran",
    "UserProject",
    "copy_example",
    "docs_blocks",
    "exported",
    "ok",
    "readme_block",
    "readme_blocks",
    "run_line",
    "user_env",
    "user_project",
]

DOCS_PAGE = REPO / "docs" / "examples.md"
_MARKED_BLOCK = re.compile(
    r"<!-- (tested|not-runnable): ([^\n]*?) -->\n```sh\n(.*?)```", flags=re.S
)


def _blocks(text: str) -> dict[str, list[str]]:
    """``{test id: the sh blocks marked as tested by it, in order}``."""
    blocks: dict[str, list[str]] = {}
    for kind, what, body in _MARKED_BLOCK.findall(text):
        if kind == "tested":
            blocks.setdefault(what, []).append(body)
    return blocks


def readme_block(example: str, test_id: str) -> list[str]:
    """The command lines of the README blocks of ``examples/<example>`` marked as tested by
    ``test_id`` (``tests/examples/<file>.py::<test>``), in order; comments and blank lines
    dropped."""
    readme = REPO / "examples" / example / "README.md"
    blocks = _blocks(readme.read_text())
    assert test_id in blocks, f"{readme.relative_to(REPO)} has no block marked tested: {test_id}"
    lines = [line.strip() for body in blocks[test_id] for line in body.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def readme_blocks(example: str) -> dict[str, list[str]]:
    """Every block of ``examples/<example>/README.md`` marked as tested, by test id."""
    return _blocks((REPO / "examples" / example / "README.md").read_text())


def docs_blocks() -> dict[str, list[str]]:
    """The blocks of ``docs/examples.md`` marked as tested, by test id."""
    return _blocks(DOCS_PAGE.read_text())


def exported(lines: list[str], *, cwd: Path, env: dict[str, str]) -> dict[str, str]:
    """The environment after a shell ran ``lines`` (``export X=...`` lines, as a user types
    them before the next commands), for the lines that follow."""
    script = "\n".join([*lines, "env -0"])
    proc = subprocess.run(
        ["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, f"{lines} failed:\n{proc.stderr}"
    pairs = (entry.partition("=") for entry in proc.stdout.split("\0") if entry)
    return {name: value for name, _, value in pairs if name not in ("_", "SHLVL", "PWD")}


def copy_example(example: str, into: Path) -> Path:
    """``examples/<example>`` copied into ``into``/<example> (outside the repository), without
    what a run inside the checkout may have left there."""
    target = into / example
    shutil.copytree(
        REPO / "examples" / example,
        target,
        ignore=shutil.ignore_patterns("__pycache__", ".fxd*", "*.db", "ledger.txt", ".venv*"),
    )
    return target


def user_env(venv: Venv, **extra: str) -> dict[str, str]:
    """The environment of a user's shell with ``venv`` activated: its ``bin`` first on PATH,
    no PYTHONPATH, no ``FXD_*`` or provider setting of the machine's (the test sets them)."""
    env = {
        k: v
        for k, v in clean_env().items()
        if not k.startswith(("OPENAI_", "ANTHROPIC_")) and k != "AGENT_MODEL"
    }
    env["PATH"] = f"{venv.bin}:{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv.root)
    return env | extra


@dataclass(frozen=True)
class Ran:
    line: str
    returncode: int
    stdout: str
    stderr: str

    @property
    def killed(self) -> bool:
        """Killed by SIGKILL: -9 when bash exec'd the command itself (a one-command line),
        128 + 9 when bash reports a child it forked."""
        return self.returncode in (-signal.SIGKILL, 128 + signal.SIGKILL)


def run_line(line: str, *, cwd: Path, env: dict[str, str], timeout: float = 60) -> Ran:
    """Run one README line as a shell runs it (``bash -c``)."""
    try:
        proc = subprocess.run(
            ["bash", "-c", line],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"timed out after {timeout:g}s: {line}\n{exc.stdout!r}\n{exc.stderr!r}")
    return Ran(line, proc.returncode, proc.stdout, proc.stderr)


def ok(ran: Ran) -> str:
    """The stdout of a line that must succeed."""
    assert ran.returncode == 0, (
        f"`{ran.line}` exited {ran.returncode}\n--- stdout\n{ran.stdout}\n--- stderr\n{ran.stderr}"
    )
    return ran.stdout


@dataclass(frozen=True)
class UserProject:
    """``examples/<example>`` as a user has it: copied into an empty directory, with a shell
    there whose venv has the built wheel installed."""

    example: str
    root: Path
    env: dict[str, str]

    def commands(self, test_id: str) -> list[str]:
        """The README's command lines that ``test_id`` runs (:func:`readme_block`)."""
        return readme_block(self.example, test_id)

    def run(self, line: str, *, timeout: float = 60) -> Ran:
        """Run one README line in the project, as its user's shell does."""
        return run_line(line, cwd=self.root, env=self.env, timeout=timeout)

    def ok(self, line: str) -> str:
        """The stdout of a line that must succeed."""
        return ok(self.run(line))


def user_project(example: str, into: Path, extras: str = EXTRAS) -> UserProject:
    """``examples/<example>`` copied into ``into``, with the shell of a user who installed the
    wheel with ``extras`` (one venv per set of extras in a run: ``wheel_venv``)."""
    return UserProject(example, copy_example(example, into), user_env(wheel_venv(extras)))
