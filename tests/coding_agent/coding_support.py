"""Running ``examples/coding_agent/run.py`` from the tests: a process with the machine's model
choices removed (the test sets what it wants), in the foreground or in the background, a gate
that holds the project's test run open, and the checks of what a run leaves behind."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from fxdurable.backends import open_store
from fxdurable.testing import check_store

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "examples" / "coding_agent" / "run.py"
# The coding agent's page of the docs site: its commands are what these tests run.
PAGE = ROOT / "docs" / "coding-agent.md"
# What picks a model or a crash: the tests choose, not the machine they run on.
_CHOOSERS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "FXD_CODING_MODEL")


def readme_sh_block(n: int) -> str:
    """The ``n``-th ``sh`` block of the coding agent's page (docs/coding-agent.md)."""
    return re.findall(r"```sh\n(.*?)```", PAGE.read_text(), flags=re.S)[n]


def readme_args(n: int, option: str) -> list[str]:
    """What the page's ``n``-th block passes to run.py as ``ARGS=...`` on its line that
    uses ``option``, split as the shell splits it."""
    for line in readme_sh_block(n).splitlines():
        words = shlex.split(line, comments=True)
        args = [w.removeprefix("ARGS=") for w in words if w.startswith("ARGS=")]
        if args and option in args[0]:
            return shlex.split(args[0])
    raise AssertionError(f"the page's block {n} has no ARGS with {option}")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _CHOOSERS and k != "FXD_CRASH_AT"}
    return env | extra


def run(
    where: Path, *args: str, timeout: float = 60, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(RUN), "--dir", str(where), *args],
        cwd=where.parent,
        env=clean_env(**env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def workspace(where: Path, session: str = "coder") -> Path:
    return where / "workspace" / session


def project_tests(where: Path, session: str = "coder") -> subprocess.CompletedProcess[str]:
    """The project's tests, run verbosely in the session's workspace by this interpreter."""
    return subprocess.run(
        [sys.executable, "-m", "unittest", "-v"],
        cwd=workspace(where, session),
        capture_output=True,
        text=True,
        check=False,
    )


def project_tests_pass(where: Path, session: str = "coder") -> bool:
    return project_tests(where, session).returncode == 0


def audit(where: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "fxdurable", "check", "--db", str(where / "coding.db")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def cart(where: Path, session: str = "coder") -> str:
    return (workspace(where, session) / "shop" / "cart.py").read_text()


def read_db(where: Path, body: Callable[[Any], T]) -> T:
    """``body(view)`` in one read of the run's store (another process may be writing it)."""
    store = open_store(f"sqlite:///{where / 'coding.db'}")
    try:
        return store.read(body)
    finally:
        store.close()


def assert_at_rest_invariants(where: Path) -> None:
    """``fxdurable check`` in a process of its own, and the checker at rest, here."""
    assert "every invariant holds" in audit(where)
    summary = read_db(where, lambda v: check_store(v, now=time.time(), at_rest=True))
    assert summary.violations == (), summary.violations


# The cart's two bugs, and their fixes as the agent writes them (indentation kept).
BUGGY = (
    "return sum(unit_price for _item, unit_price, _qty in self.lines)",
    "return round(self.subtotal() - self.discount_percent, 2)",
)
FIXED = (
    "return sum(unit_price * qty for _item, unit_price, qty in self.lines)",
    "return round(self.subtotal() * (1 - self.discount_percent / 100), 2)",
)
TEMPLATE_CART = ROOT / "examples" / "coding_agent" / "project" / "shop" / "cart.py"


def assert_cart_fixed_once(where: Path, session: str = "coder") -> None:
    """Each fix in the cart exactly once, no bug left, and the session's edit ledger one
    chain of edits from the template's cart to this one: each executed edit execution
    recorded once, none applied on top of itself."""
    text = cart(where, session)
    assert [text.count(fixed) for fixed in FIXED] == [1, 1], text
    assert [text.count(bug) for bug in BUGGY] == [0, 0], text
    entries = ledger(where, session)
    edits = read_db(
        where,
        lambda v: [t for t in v.session_tool_tasks(session) if t.tool == "edit_file"],
    )
    executed = {t.execution_id for t in edits if t.runs > 0}
    assert set(entries) == executed, (sorted(entries), sorted(executed))
    chain = [e for e in entries.values() if e["path"] == "shop/cart.py"]
    sha = _sha(TEMPLATE_CART.read_bytes())
    for _ in chain:
        (step,) = [e for e in chain if e["before_sha256"] == sha]
        sha = step["after_sha256"]
    assert sha == _sha(text.encode()), "the cart is not the end of its ledger's chain"


def ledger(where: Path, session: str = "coder") -> dict[str, dict[str, Any]]:
    """The directory workspace's edit ledger of a session, by execution id."""
    entries = (where / "workspace" / ".fxdurable" / "ledger" / session).glob("*.json")
    return {p.stem: json.loads(p.read_text()) for p in entries}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tree(where: Path) -> dict[str, bytes]:
    """Every file under ``where``, by relative path (caches left out)."""
    return {
        p.relative_to(where).as_posix(): p.read_bytes()
        for p in sorted(where.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


# How long a run may take before the test calls it a hang (each takes a second or two).
HANG_S = 60.0


class Background:
    """run.py in the background, its output (stdout and stderr) collected as it comes."""

    def __init__(self, where: Path, *args: str, **env: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(RUN), "--dir", str(where), *args],
            cwd=where.parent,
            env=clean_env(**env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.pid = self.proc.pid
        self._lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self._lines)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait(self) -> int:
        """Its exit status; a run still going after :data:`HANG_S` is a hang, killed and
        failed with its output."""
        try:
            code = self.proc.wait(timeout=HANG_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            raise AssertionError(f"run.py hung; its output:\n{self.output}") from None
        self._reader.join()
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        return code

    def until(self, what: str, ready: Callable[[], T | None]) -> T:
        """Poll ``ready()`` until it gives a value, failing (with the output) if the run
        exits first or hangs."""
        deadline = time.monotonic() + HANG_S
        while (value := ready()) is None:
            if not self.alive():
                raise AssertionError(f"run.py exited before {what}; its output:\n{self.output}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} after {HANG_S:g}s; output:\n{self.output}")
            time.sleep(0.01)
        return value


# A sitecustomize for the processes of a gated run: the first ``python3 -m unittest`` of the
# run (the agent's first test run) says it started, then waits until the test releases it.
_GATE_SITE = """\
import os, sys

_gate = os.environ.get("CODING_TEST_GATE")
if _gate and "unittest" in sys.orig_argv:
    try:  # the first test run takes the gate; the others run freely
        os.rename(os.path.join(_gate, "armed"), os.path.join(_gate, "taken"))
    except FileNotFoundError:
        pass
    else:
        _mark = os.path.join(_gate, "running")
        with open(_mark + ".tmp", "w") as _file:
            _file.write(f"{os.getpid()} {os.getppid()}")
        os.rename(_mark + ".tmp", _mark)
        with open(os.path.join(_gate, "release")) as _fifo:  # until the test opens it
            _fifo.read()
"""


class UnittestGate:
    """Holds the agent's first run of the project's tests open, so a test can act while
    the ``shell`` call is running (kill the worker, steer the turn), without making the
    run itself slower: the unittest process blocks on a FIFO the test opens to release it.
    Its environment (``env()``) reaches the agent's shell, which keeps everything but
    credentials."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir()
        (root / "sitecustomize.py").write_text(_GATE_SITE)
        os.mkfifo(root / "release")
        (root / "armed").touch()

    def env(self) -> dict[str, str]:
        return {"PYTHONPATH": str(self.root), "CODING_TEST_GATE": str(self.root)}

    def held(self, run: Background) -> tuple[int, int]:
        """Once the held test run started: its pid and its parent's."""

        def started() -> tuple[int, int] | None:
            try:
                pid, ppid = (self.root / "running").read_text().split()
            except FileNotFoundError:
                return None
            return int(pid), int(ppid)

        return run.until("the agent's first test run", started)

    def release(self) -> None:
        with open(self.root / "release", "w"):
            pass  # the held run reads end-of-file and goes on
