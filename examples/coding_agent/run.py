"""Run the coding agent on the embedded default: a SQLite store and this process's queue in
``--dir`` (default ``.fxd-coding``), the session's workspace under ``--dir``/workspace, seeded
from ``project/``.

    python examples/coding_agent/run.py [--dir .fxd-coding] [--crash-at POINT] [--yes]
                                        [--scripted] [--slow] [--session ID]
                                        [--fork-from SESSION@EVENT] [--steer TEXT]

Kill it at any moment (Ctrl-\\, ``kill -9``, or ``--crash-at tool.after-execute:edit_file``)
and run it again: it resumes the unfinished turn from its last committed step. Every shell
command asks for permission first: y/n on a terminal, approved (and said so) with ``--yes``
or when stdin is not a terminal.

From another terminal, while it works, ``--steer TEXT`` hands the running turn a message it
reads at its next step. ``--session NEW --fork-from coder@EVENT`` starts session NEW from
``coder``'s conversation as it was after its event EVENT (the numbers ``fxdurable trace``
prints) and carries on there, in a workspace of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

# Run as a script: the repository's root makes ``examples.coding_agent`` importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import fxdurable as fx
from examples.coding_agent.agent import PROJECT, coder, model_from_env
from examples.coding_agent.policy import coding_policy
from examples.coding_agent.task import CARRY_ON, TASK, run_project_tests
from fxdurable import tools as fxt
from fxdurable.cli.follow import (
    Answerer,
    arm_crash,
    event_cursor,
    follow,
    line_buffered_stdout,
    submissions,
    unfinished,
)
from fxdurable.cli.render import Style
from fxdurable.core.store import ReadView
from fxdurable.errors import ConfigurationError
from fxdurable.runtime.models.base import Model

SESSION = "coder"
# The tools that change the workspace's files.
WRITE_TOOLS = ("edit_file", "write_file")
# Real models' streams stay open after their last event; the scripted server's do too.
HOLD_OPEN_S = 30.0
# Ctrl-C / SIGTERM: how long a running step (a shell command) may take to finish before the
# runtime cancels it (killing the command's process group) and the script exits.
SHUTDOWN_GRACE_S = 10.0
SLOW_EVENT_S = 0.03  # --slow: a second or two per model reply


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A durable coding agent fixes failing tests.")
    parser.add_argument("--dir", default=".fxd-coding", help="where the store and workspace live")
    parser.add_argument(
        "--crash-at", metavar="POINT", help="SIGKILL this process at POINT[:tool] (a crash test)"
    )
    parser.add_argument("--yes", action="store_true", help="approve every shell command")
    parser.add_argument(
        "--scripted", action="store_true", help="the scripted model even when keys are set"
    )
    parser.add_argument(
        "--slow",
        action="store_true",
        help="the scripted model streams at a human pace (time to kill it mid-run)",
    )
    parser.add_argument("--session", default=SESSION, help=f"the session (default {SESSION})")
    parser.add_argument(
        "--fork-from",
        metavar="SESSION@EVENT",
        type=_fork_point,
        help="start --session from SESSION's conversation as of its event EVENT "
        "(see `fxdurable trace SESSION`), then carry on",
    )
    parser.add_argument(
        "--steer",
        metavar="TEXT",
        help="hand TEXT to the session's running turn (run by another run.py), then exit",
    )
    args = parser.parse_args(argv)
    style = Style()
    try:
        arm_crash(args.crash_at)
        line_buffered_stdout()
        workdir = Path(args.dir)
        workdir.mkdir(parents=True, exist_ok=True)
        workspace = fxt.directory(workdir / "workspace", template=PROJECT)
        if args.steer is not None:
            return asyncio.run(_steer(workdir, workspace, args.session, args.steer, style))
        if args.fork_from and args.fork_from[0] == args.session:
            raise ConfigurationError("--fork-from needs a new --session to fork into")
        _python_first_on_path()
        with _model(args.scripted, args.slow, style) as model:
            run = _Run(workdir, workspace, args.session, args.fork_from, args.yes, style)
            code = asyncio.run(run.main(model))
        if args.crash_at:
            print(
                f"note: crash point {args.crash_at} was never reached in this run", file=sys.stderr
            )
    except ConfigurationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return code


def _fork_point(text: str) -> tuple[str, int]:
    source, at, event = text.rpartition("@")
    if not (source and at and event.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is not SESSION@EVENT (e.g. coder@24)")
    return source, int(event)


def _store_url(workdir: Path) -> str:
    return f"sqlite:///{(workdir / 'coding.db').resolve()}"


async def _steer(
    workdir: Path, workspace: fxt.DirectoryWorkspace, session_id: str, text: str, style: Style
) -> int:
    """Record ``text`` for the session's running turn, which reads it at its next step.

    This process runs no turn: its runtime is never started (no workers, no recovery scan),
    so a turn a crash left unfinished is not taken over here, without the permission
    prompts of the run that follows it. The model is never called; any will do."""
    rt = fx.Runtime([coder(workspace, fx.ScriptedModel(coding_policy))], store=_store_url(workdir))
    try:
        steering = await rt.session(session_id).steer(text)
    except fx.SessionNotFoundError:
        print(
            f"error: no session '{session_id}' in {workdir / 'coding.db'} yet; start it by "
            "running this script without --steer",
            file=sys.stderr,
        )
        return 2
    finally:
        await rt.aclose()
    if steering.steered:
        print(
            style.green(
                f"Steered session '{session_id}' (event {steering.cursor}): its running turn "
                "reads the message at its next step."
            )
        )
    else:
        print(
            style.yellow(
                f"Session '{session_id}' had no turn running: the message is queued as a new "
                "one. Run this script without --steer to follow it."
            )
        )
    return 0


class _Run:
    """One run of the script: start, resume or fork the session, follow it to the end, and
    check its workspace."""

    def __init__(
        self,
        workdir: Path,
        workspace: fxt.DirectoryWorkspace,
        session_id: str,
        fork_from: tuple[str, int] | None,
        yes: bool,
        style: Style,
    ) -> None:
        self.workdir = workdir
        self.db = workdir / "coding.db"
        self.workspace = workspace
        self.session_id = session_id
        self.fork_from = fork_from
        self.yes = yes
        self.style = style

    async def main(self, model: Model) -> int:
        style = self.style
        settings = fx.WorkerSettings(lease_ttl_s=10.0, heartbeat_s=2.0, scan_interval_s=1.0)
        async with fx.Runtime(
            [coder(self.workspace, model)],
            store=_store_url(self.workdir),
            queue="local",
            settings=settings,
            shutdown_grace_s=SHUTDOWN_GRACE_S,
        ) as rt:
            rt.install_signal_handlers()
            await self._say_others_resume(rt)
            if self.fork_from is not None:
                await self._fork(rt, *self.fork_from)
            session = rt.session(self.session_id)
            targets, cursor = await self._targets(rt, session)
            answer = _answerer(self.yes, style)
            final = await follow(rt, session, targets, cursor, style, answer=answer)
            children = await asyncio.to_thread(
                rt.journal.read,
                lambda v: [
                    t.child_session
                    for t in v.session_tool_tasks(self.session_id)
                    if t.child_session
                ],
            )
        return self._report(final, children)

    async def _say_others_resume(self, rt: fx.Runtime) -> None:
        """Other sessions in the store with unfinished turns (a crash left them) are resumed
        by this process too, as by any worker on the store; say so, since only this run's
        session is followed here."""

        def others(view: ReadView) -> list[str]:
            return [
                s.id
                for s in view.active_sessions()
                if s.parent_session is None
                and s.id != self.session_id
                and view.unsettled_submissions(s.id)
            ]

        for other in await asyncio.to_thread(rt.journal.read, others):
            print(
                self.style.yellow(
                    f"Session '{other}' has an unfinished turn too: this process resumes it "
                    "as well, as any worker on this store would, up to its next permission "
                    f"prompt or until this run ends. `--session {other}` follows it."
                )
            )

    async def _fork(self, rt: fx.Runtime, source: str, event: int) -> None:
        fork = await rt.fork(source, self.session_id, after=event)
        if fork.created:
            print(
                self.style.bold(
                    f"Forked session '{source}' after its event {event} into "
                    f"'{self.session_id}' ({fork.messages} messages). Its workspace starts "
                    "as a fresh copy of the project: a directory cannot go back to a "
                    "recorded step, so fork from before the first edit."
                )
            )
        edits, first = await asyncio.to_thread(
            rt.journal.read, lambda v: self._edits_before(v, source)
        )
        if edits:
            print(
                self.style.yellow(
                    f"Warning: the fork's conversation holds {edits} file edit(s) that its "
                    "fresh copy of the project does not have; the model will believe them "
                    f"applied. --fork-from {source}@{first} is just before the first edit."
                )
            )

    def _edits_before(self, view: ReadView, source: str) -> tuple[int, int]:
        """How many file writes the fork copied, and the source's event just before its
        first write started (the model's reply asking for it: forking there leaves the
        call out)."""
        copied = [
            t
            for t in view.session_tool_tasks(self.session_id)
            if t.tool in WRITE_TOOLS and t.status == "completed"
        ]
        writes = {t.id for t in view.session_tool_tasks(source) if t.tool in WRITE_TOOLS}
        started = (
            e.seq
            for e in view.events(source)
            if e.type == "tool.started" and e.data.get("task") in writes
        )
        return len(copied), next(started, 1) - 1

    async def _targets(
        self, rt: fx.Runtime, session: fx.SessionHandle
    ) -> tuple[list[fx.Submission], int]:
        """The turns to follow (resumed, or a new one), and the event cursor to print from."""
        style, db = self.style, self.db
        # Request ids are the store's, not the session's: one per session.
        request_id = f"{self.session_id}-task"
        records = await submissions(rt, self.session_id)
        targets = unfinished(records)
        cursor = await event_cursor(session)
        if targets:
            print(
                style.yellow(
                    f"Recovering session '{self.session_id}': {len(targets)} unfinished "
                    f"turn(s) found in {db}. Resuming from the last committed step."
                )
            )
        elif records:
            print(
                style.dim(
                    f"The coder already finished its task in {self.workdir} "
                    f"({records[-1].status}); its workspace is checked below. "
                    f"(Remove {self.workdir} to start over.)"
                )
            )
        elif self.fork_from is not None:
            print(style.bold(f"The fork carries on; its turns are stored in {db}"))
            targets = [await session.submit(CARRY_ON, request_id=request_id)]
        else:
            print(style.bold(f"A coding agent fixes failing tests; its turn is stored in {db}"))
            targets = [await session.submit(TASK, request_id=request_id)]
        return targets, cursor

    def _report(self, final: list[fx.Submission] | None, children: list[str]) -> int:
        style, db, session_id = self.style, self.db, self.session_id
        if final is None:
            print(
                style.yellow(
                    "\nStopped at a step boundary (or, for a step still running after the "
                    f"{SHUTDOWN_GRACE_S:g} s shutdown grace, by cancelling it: its outcome is then "
                    "unknown); nothing recorded is lost. Run it again to continue the turn."
                )
            )
            return 3
        print()
        for sub in final:
            if sub.status == fx.SubmissionStatus.COMPLETED:
                print(style.green(f"Outcome: completed — {sub.result}"))
            else:
                reason = sub.error.message if sub.error else sub.status.value
                print(style.red(f"Outcome: {sub.status} — {reason}"))
        passed = _project_tests(self.workspace.session_dir(session_id), style)
        print(style.dim(f"Trace: fxdurable trace {session_id} --db {db}"))
        for child in children:
            print(style.dim(f"  its explore subagent's turn: fxdurable trace {child} --db {db}"))
        print(style.dim(f"Audit: fxdurable check --db {db}"))
        completed = all(s.status == fx.SubmissionStatus.COMPLETED for s in final)
        return 0 if completed and passed else 1


def _answerer(yes: bool, style: Style) -> Answerer:
    auto = "--yes" if yes else (None if sys.stdin.isatty() else "stdin is not a terminal")

    async def answer(question: fx.Question) -> fx.Answer:
        if auto is not None:
            print(style.cyan(f"  permission: {question.question} yes (approved: {auto})"))
            return fx.allow()
        line = await _read_line(f"  permission: {question.question} [y/n] ")
        if line.strip().lower() in ("y", "yes"):
            return fx.allow()
        return fx.deny("the user said no")

    return answer


def _read_line(prompt: str) -> asyncio.Future[str]:
    """``input(prompt)`` on a daemon thread: the event loop keeps running the runtime, and an
    exit never waits for a prompt nobody answers."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[str] = loop.create_future()

    def settle(line: str) -> None:
        if not future.done():
            future.set_result(line)

    def read() -> None:
        try:
            line = input(prompt)
        except EOFError:
            line = ""
        loop.call_soon_threadsafe(settle, line)

    threading.Thread(target=read, daemon=True).start()
    return future


def _project_tests(where: Path, style: Style) -> bool:
    """Run the project's tests in the workspace, as a person checking the agent's work would."""
    print(style.bold(f"\nThe workspace: {where}"))
    if not where.is_dir():
        print(style.red("(no workspace yet: the agent never touched a file)"))
        return False
    done = run_project_tests(where)
    summary = " ".join(ln for ln in done.stderr.strip().splitlines()[-3:] if ln.strip())
    if done.returncode == 0:
        print(style.green(f"Its tests, run by this script: {summary}"))
    else:
        print(style.red(f"Its tests, run by this script, fail:\n{done.stderr}"))
    return done.returncode == 0


@contextlib.contextmanager
def _model(scripted: bool, slow: bool, style: Style) -> Iterator[Model]:
    """The environment's real model; else the scripted policy, served as OpenAI streams by a
    local server with real models' quirks, through the real httpx client."""
    chosen = None if scripted else model_from_env()
    if chosen is not None:
        model, described = chosen
        print(style.dim(f"model: {described}"))
        yield model
        return
    from fxdurable.runtime.models.openai import OpenAIModel
    from fxdurable.testing.model_server import ScriptedModelServer
    from fxdurable.testing.wire_common import Quirks

    quirks = Quirks(
        pretty_arguments=True,
        split_arguments=7,
        usage_last=True,
        hold_open_after_finish_s=HOLD_OPEN_S,
        # --slow: a few characters at a time, as a model under load streams.
        text_chunk_chars=4 if slow else 16,
        event_delay_s=SLOW_EVENT_S if slow else 0.0,
    )
    with ScriptedModelServer(coding_policy, quirks=quirks) as server:
        print(
            style.dim(
                f"model: scripted policy, served as OpenAI streams by a local server at "
                f"{server.url} (pretty-printed arguments split across chunks, usage after the "
                f"finish, streams held open {HOLD_OPEN_S:.0f} s after it). Set OPENAI_API_KEY "
                "or ANTHROPIC_API_KEY for a real model."
            )
        )
        yield OpenAIModel("scripted-coder", base_url=server.openai_base_url, api_key="sk-scripted")


def _python_first_on_path() -> None:
    """``python3`` in the agent's shell is this interpreter (the project needs only the
    stdlib; the shell's environment is a copy of this one, credentials removed)."""
    bin_dir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    if path.split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = os.pathsep.join([bin_dir, path]) if path else bin_dir


if __name__ == "__main__":
    sys.exit(main())
