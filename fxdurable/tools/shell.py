"""The shell tool: a command run in the session's workspace, bounded and without credentials.

:func:`run_command` runs ``bash -c command`` (``/bin/sh -c`` without bash) with

- the workspace directory as its cwd and as ``HOME`` (the user's ``~/.aws``, ``~/.netrc``,
  ``~/.ssh`` are not found under ``~``);
- an environment copied from the worker's minus credentials (:func:`scrubbed_env`);
- its own process group (``start_new_session``), killed whole (SIGKILL) on timeout, on
  cancellation (an abort) and when the command exits, so nothing it started in the
  background outlives the call;
- on Linux, a supervisor between the worker and the shell (a few lines of Python,
  :data:`_SUPERVISOR`), told by the kernel when the worker dies (``PR_SET_PDEATHSIG``, even by
  SIGKILL), which then kills the command's whole process group: the shell and whatever it
  started (a test runner's workers, a pipeline, ``cd x && make``'s children). Without it only
  the shell itself would die with the worker, and the rest would go on changing a directory
  workspace under the turn that recovers it;
- its output (stdout and stderr together) reported as progress while it runs, and returned
  tail-capped at ``output_limit`` characters.

What this is not: a sandbox. The command runs as the worker's user and can read whatever
that user can (``cd ../..`` works; ``cat /etc/passwd`` works); only the environment is
scrubbed. Run workers as a user that can read nothing else, or in a container, when that
matters.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import re
import shutil
import signal
import sys
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pydantic

from fxdurable.errors import ConfigurationError
from fxdurable.runtime.tools import ReplayPolicy, Tool, define_tool
from fxdurable.tools.workspace import Workspace

if TYPE_CHECKING:
    from fxdurable.runtime.tools import ToolContext

__all__ = ["ShellInput", "is_credential", "run_command", "scrubbed_env", "shell_tool"]

_SUFFIXES = ("_KEY", "_TOKEN")
_PREFIXES = ("AWS_", "FXD_", "XDG_")  # XDG_*: the user's config, data and runtime sockets
_WORDS = ("SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
_NAMES = frozenset({"SSH_AUTH_SOCK", "GPG_AGENT_INFO"})  # an agent socket is a key too
# After the command exits, how long its output may still take to arrive (the group has been
# killed, so only a process that left the group could hold the pipe open longer).
_DRAIN_S = 5.0
_POLL_S = 0.02


# A URL that carries a password: ``scheme://user:password@host`` (``DATABASE_URL``,
# ``REDIS_URL``, ``SENTRY_DSN``, ``PIP_INDEX_URL``, ...), whatever the variable is called.
_URL_WITH_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/@\s]*:[^/@\s]*@")


def is_credential(name: str, value: str = "") -> bool:
    """Whether an environment variable is kept from the shell: ``*_API_KEY`` and any
    ``*_KEY``, ``*_TOKEN``, names containing SECRET, PASSWORD, PASSWD or CREDENTIAL, every
    ``AWS_*`` and ``FXD_*`` (store and queue URLs carry passwords and tokens), ``XDG_*``,
    the SSH/GPG agent sockets, and any variable whose value is a URL with a password in it."""
    upper = name.upper()
    return (
        upper.endswith(_SUFFIXES)
        or upper.startswith(_PREFIXES)
        or any(word in upper for word in _WORDS)
        or upper in _NAMES
        or _URL_WITH_PASSWORD.search(value) is not None
    )


def scrubbed_env(environ: Mapping[str, str], home: Path) -> dict[str, str]:
    """``environ`` without credentials (:func:`is_credential`), with ``HOME`` = ``home``."""
    env = {name: value for name, value in environ.items() if not is_credential(name, value)}
    env["HOME"] = str(home)
    return env


# The command's supervisor (Linux): ``python -c _SUPERVISOR SHELL -c COMMAND``, the leader of
# the command's process group. The kernel sends it SIGTERM when the worker dies
# (PR_SET_PDEATHSIG, armed by _tell_when_parent_dies); it kills the whole group then. Otherwise
# it runs the shell (signals the way a shell expects them: SIGPIPE and SIGXFSZ at their
# defaults, which Python changes), waits for it, and exits as it did, a signal re-raised.
_SUPERVISOR = """\
import os, signal, sys
signal.signal(signal.SIGTERM, lambda *_: os.killpg(0, signal.SIGKILL))
pid = os.fork()
if pid == 0:
    for sig in (signal.SIGTERM, signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    try:
        os.execv(sys.argv[1], sys.argv[1:])
    finally:
        os._exit(127)
code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
if code < 0:
    if -code != signal.SIGKILL:
        signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
sys.exit(code)
"""


def _tell_when_parent_dies(sig: int) -> Callable[[], None] | None:
    """A preexec function asking Linux to send the child ``sig`` when its parent dies (the
    thread that forked it: the event loop's, which lives as long as the runtime); None
    elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)  # loaded before the fork, not in the child
    parent = os.getpid()
    pr_set_pdeathsig = 1

    def preexec() -> None:
        libc.prctl(pr_set_pdeathsig, sig, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the request took effect
            os._exit(137)

    return preexec


class _Tail:
    """The last ``limit`` characters of the output, and how many were cut before them."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.chunks: deque[str] = deque()
        self.size = 0
        self.cut = 0

    def add(self, text: str) -> None:
        self.chunks.append(text)
        self.size += len(text)
        while self.size - len(self.chunks[0]) >= self.limit:
            self.size -= len(dropped := self.chunks.popleft())
            self.cut += len(dropped)

    def text(self) -> str:
        joined = "".join(self.chunks)
        extra = len(joined) - self.limit
        if extra > 0:
            joined, cut = joined[extra:], self.cut + extra
        else:
            cut = self.cut
        return f"[... {cut} characters cut ...]\n{joined}" if cut else joined


def _kill_group(pid: int) -> None:
    # ProcessLookupError: the group is gone; PermissionError: macOS, for a group of zombies.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def run_command(
    command: str, *, cwd: Path, timeout_s: float, output_limit: int, ctx: ToolContext
) -> str:
    """Run ``command`` in ``cwd`` (see the module's docstring) and return ``"exit code:
    N\\n"`` plus its output, or a timed-out / cancelled note plus the output so far."""
    shell = shutil.which("bash") or "/bin/sh"
    argv = [shell, "-c", command]
    if sys.executable:  # -I -S: the supervisor imports nothing from the environment
        preexec = _tell_when_parent_dies(signal.SIGTERM)
        if preexec is not None:
            argv = [sys.executable, "-I", "-S", "-c", _SUPERVISOR, *argv]
    else:  # an embedded interpreter with no executable to run it: the shell dies alone
        preexec = _tell_when_parent_dies(signal.SIGKILL)
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=scrubbed_env(os.environ, cwd),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=preexec,
    )
    tail = _Tail(output_limit)
    reader = asyncio.ensure_future(_pump(proc, tail, ctx))
    exited = asyncio.ensure_future(_exit(proc))
    aborted = asyncio.ensure_future(ctx.cancelled.wait())
    outcome = "timed out"
    try:
        done, _ = await asyncio.wait(
            {exited, aborted}, timeout=timeout_s, return_when="FIRST_COMPLETED"
        )
        outcome = "exited" if exited in done else "cancelled" if aborted in done else outcome
    finally:  # also when this call is cancelled: the group dies with it
        _kill_group(proc.pid)
        aborted.cancel()
        await asyncio.wait({reader}, timeout=_DRAIN_S)
        reader.cancel()
        await proc.wait()
    if outcome == "exited":
        code = proc.returncode
        head = f"exit code: {code}"
        if code is not None and code < 0:
            head += f" (killed by {signal.Signals(-code).name})"
    elif outcome == "cancelled":
        head = "cancelled; the command's process group was killed"
    else:
        head = f"timed out after {timeout_s:g}s; the command's process group was killed"
    return f"{head}\n{tail.text()}"


async def _exit(proc: asyncio.subprocess.Process) -> None:
    """Return once the shell itself has exited. Not ``proc.wait()``: that also waits for its
    pipes to close, which a process it left in the background holds open."""
    while proc.returncode is None:
        await asyncio.sleep(_POLL_S)


async def _pump(proc: asyncio.subprocess.Process, tail: _Tail, ctx: ToolContext) -> None:
    assert proc.stdout is not None
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    while chunk := await proc.stdout.read(65536):
        text = decoder.decode(chunk)
        tail.add(text)
        ctx.progress(text)
    tail.add(decoder.decode(b"", final=True))


class ShellInput(pydantic.BaseModel):
    command: str = pydantic.Field(description="a bash command, run in the workspace directory")
    timeout_s: float | None = pydantic.Field(
        default=None, gt=0, description="seconds before it is killed (capped by the tool's)"
    )


def shell_tool(
    workspace: Workspace,
    *,
    name: str = "shell",
    replay: ReplayPolicy = "unsafe",
    timeout_s: float = 120.0,
    output_limit: int = 30_000,
    description: str | None = None,
) -> Tool:
    """A tool that runs a bash command in the session's workspace (see :mod:`this module
    <fxdurable.tools.shell>`). Give another ``name`` and ``replay`` for a second shell under
    another policy, e.g. ``shell_tool(ws, name="run_tests", replay="safe")``."""
    if not timeout_s > 0 or output_limit < 1:
        raise ConfigurationError(
            f"shell tool {name!r}: timeout_s must be positive and output_limit at least 1 "
            f"(got {timeout_s!r} and {output_limit!r})"
        )

    async def run_shell(inp: ShellInput, ctx: ToolContext) -> str:
        files = await asyncio.to_thread(workspace.open, ctx)
        limit = timeout_s if inp.timeout_s is None else min(inp.timeout_s, timeout_s)
        return await files.run_shell(
            inp.command, timeout_s=limit, output_limit=output_limit, ctx=ctx
        )

    return define_tool(
        name,
        description=description
        or (
            "Run a bash command in the workspace directory (its cwd). Answers the exit code "
            f"and the output (the last {output_limit} characters). Killed after "
            f"{timeout_s:g}s; credentials are not in its environment."
        ),
        input_model=ShellInput,
        execute=run_shell,
        replay=replay,
        # Past the command's own timeout: the command is killed and reported first.
        timeout_s=timeout_s + _DRAIN_S + 30.0,
    )
