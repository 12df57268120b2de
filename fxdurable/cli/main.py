"""The ``fxdurable`` command: demo, serve, worker, scan, trace, check, workspace export, init
and stage (a Lambda project)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fxdurable import __version__
from fxdurable.core.crash import check_crash_at
from fxdurable.errors import (
    ConfigurationError,
    FxDurableError,
    StoreError,
)

if TYPE_CHECKING:
    from fxdurable.core.store import Store
    from fxdurable.workers.config import WorkerConfig

# Each command imports what it runs (the store and its records, the runtime, RQ, the HTTP
# stack) inside its branch, so `fxdurable --help` and a mistyped flag answer at once.

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fxdurable", description="Durable LLM-agent turns that outlive their processes."
    )
    parser.add_argument("--version", action="version", version=f"fxdurable {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="run the durable release-engineer story")
    demo.add_argument(
        "--crash-at",
        metavar="POINT[:TOOL]",
        help="SIGKILL this process at a named crash point (e.g. tool.after-execute:deploy)",
    )
    demo.add_argument("--dir", default=".fxd-demo", help="where demo.db and deployments.log live")
    demo.add_argument(
        "--provider",
        choices=("scripted", "openai", "anthropic"),
        default="scripted",
        help="run the scripted model in process, or serve it over HTTP in a provider's wire "
        "format through the real client (default: scripted)",
    )
    demo.add_argument(
        "--store", help="store URL (default: sqlite in --dir), e.g. redis://127.0.0.1:6379/0"
    )
    demo.add_argument(
        "--queue",
        default="local",
        help="'local' (run the turn here) or rq://host:port/db: `fxdurable worker` processes "
        "with FXD_AGENTS=fxdurable.cli.demo_agent:agents run it",
    )
    demo.add_argument(
        "--invocation-budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop each invocation after this long and continue in a new one",
    )

    worker = sub.add_parser(
        "worker",
        help="run a worker for fxdurable wakes (RQ or SQS), with the reconciliation scan",
    )
    scan = sub.add_parser(
        "scan",
        help="wake every session with unsettled work and no live owner (beside rq worker, or "
        "on SQS from anywhere), and erase idle sessions past their agent's retention_days",
    )
    for cmd in (worker, scan):
        cmd.add_argument(
            "--queue",
            default=os.environ.get("FXD_QUEUE"),
            help="rq://host:port/db, sqs://QUEUE_URL_OR_NAME or postgresql://user@host:port/db",
        )
        cmd.add_argument("--store", default=os.environ.get("FXD_STORE"), help="store URL")
        cmd.add_argument(
            "--agents",
            default=os.environ.get("FXD_AGENTS"),
            help="module:attribute naming the agents (a list, or a function returning one)",
        )
    worker.add_argument("--burst", action="store_true", help="exit when the queue is empty")
    worker.add_argument("--name", help="the RQ worker name")
    worker.add_argument(
        "--scan-interval",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="reconciliation scan period (default 5; 0: never scan)",
    )
    worker.add_argument(
        "--concurrency",
        type=int,
        default=1,
        metavar="N",
        help="SQS and Postgres only: run up to N wakes at once in this process (1-10, default 1)",
    )
    worker.add_argument(
        "--no-fork",
        action="store_true",
        help="run each job in the worker process (RQ's SimpleWorker), reusing its store, event "
        "loop and connections, instead of forking a work horse per job. A SIGKILL of the "
        "worker then kills the turn in progress; its lease and recovery handle that as any "
        "crash (another worker, or this one restarted, takes the session over)",
    )
    worker.add_argument(
        "--connect-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="RQ only: give up (exit status 2) when Redis does not answer within SECONDS of "
        "starting; by default a worker started while Redis is down waits for it",
    )
    scan.add_argument(
        "--every",
        type=_positive_seconds,
        default=None,
        metavar="SECONDS",
        help="repeat until stopped, SECONDS apart (more than 0; omit it for one scan)",
    )

    workspace = sub.add_parser("workspace", help="a session's stored workspace files")
    workspace_sub = workspace.add_subparsers(dest="workspace_command", required=True)
    export = workspace_sub.add_parser(
        "export",
        help="write a session's stored workspace (fxdurable.tools.stored) into a new or empty "
        "directory",
    )
    export.add_argument("session", help="session id (a subagent's child: its root's files)")
    export.add_argument("directory", help="where to write the files (created if missing)")
    where = export.add_mutually_exclusive_group(required=True)
    where.add_argument("--db", help="path of a SQLite store file")
    where.add_argument("--store", help="store URL, e.g. redis://127.0.0.1:6379/0")

    from fxdurable.cli import lambda_project

    lambda_project.add_parsers(sub)
    from fxdurable.cli import schedule

    schedule.add_parsers(sub)
    from fxdurable.cli import erase as erase_cli

    erase_cli.add_parser(sub)

    from fxdurable.cli import migrate

    migrate.add_parser(sub)

    serve = sub.add_parser("serve", help="serve the HTTP API (chat, reconnect, steer, abort)")
    serve.add_argument("--host", default="127.0.0.1", help="interface to bind (default: local)")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument(
        "--agents",
        default=None,
        help="module:attribute naming the agents (default: $FXD_AGENTS, else the demo agent)",
    )
    serve_store = serve.add_mutually_exclusive_group()
    serve_store.add_argument(
        "--store", default=None, help="store URL (default: $FXD_STORE or SQLite)"
    )
    serve_store.add_argument("--db", default=None, help="path of a SQLite store file")
    serve.add_argument("--queue", default=None, help="queue URL (default: $FXD_QUEUE or local)")
    serve.add_argument(
        "--dev",
        action="store_true",
        default=None,  # not given: FXD_HTTP_DEV=1 decides (app_from_env reads it)
        help="no authentication (every caller is 'dev'; or FXD_HTTP_DEV=1): only on your own "
        "machine",
    )
    serve.add_argument("--tokens-file", help="principal=token lines (or $FXD_HTTP_TOKENS)")
    serve.add_argument(
        "--demo",
        action="store_true",
        help="with --dev: run the turns in a separate worker process, which the console's "
        "crash button (POST /demo/crash) SIGKILLs and replaces; the demo agent's tools run at "
        "a human pace",
    )
    serve.add_argument(
        "--invocation-budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="hand a turn to the queue after this long in one wake",
    )

    for cmd in (worker, scan, serve):
        _add_app_dir(cmd)

    for name, text in (
        ("trace", "print a session's timeline, one line per step"),
        ("check", "audit a store against the crash invariants"),
    ):
        cmd = sub.add_parser(name, help=text)
        if name == "trace":
            cmd.add_argument("session", help="session id")
        where = cmd.add_mutually_exclusive_group(required=True)
        where.add_argument("--db", help="path of a SQLite store file")
        where.add_argument("--store", help="store URL, e.g. sqlite:///path.db")
        if name == "check":
            cmd.add_argument(
                "--at-rest",
                action="store_true",
                help="no worker is running: unsettled work counts as a violation",
            )
            cmd.add_argument(
                "--blobs",
                action="store_true",
                help="also list every blob and report those no session names (reads every "
                "blob key and every record: docs/erasure.md)",
            )
    return parser


def _add_app_dir(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--app-dir",
        default=None,
        metavar="DIR",
        help="import the --agents module from DIR, put first on sys.path (default: "
        "$FXD_APP_DIR, else the current directory)",
    )


def _export_app_dir(app_dir: str | None) -> None:
    """Resolve the application directory once and put it in the environment: the forked
    work horses, the ``--demo`` worker and every later load of the agents use the same one."""
    from fxdurable.runtime.agent_spec import APP_DIR_ENV, resolve_app_dir

    os.environ[APP_DIR_ENV] = str(resolve_app_dir(app_dir))


def _open_existing(db: str | None, url: str | None) -> Store:
    from fxdurable.backends import open_store

    if db is not None:
        url = f"sqlite:///{Path(db).resolve()}"
    assert url is not None
    return open_store(url, create=False)


def _export_workspace(store: Store, session_id: str, directory: str) -> int:
    from fxdurable.tools.workspace_export import export_workspace

    paths = export_workspace(store, session_id, directory)
    print(f"exported {len(paths)} file(s) of session {session_id} to {directory}")
    return 0


def _run_worker_command(args: argparse.Namespace) -> int:
    from fxdurable.workers.config import WorkerConfig

    missing = [
        flag
        for flag, value in (
            ("--queue", args.queue),
            ("--store", args.store),
            ("--agents", args.agents),
        )
        if not value
    ]
    if missing:
        raise ConfigurationError(
            f"{args.command} needs {', '.join(missing)} (or FXD_QUEUE, FXD_STORE, FXD_AGENTS)"
        )
    config = WorkerConfig(store_url=args.store, queue_url=args.queue, agents_spec=args.agents)
    if str(args.queue).startswith("sqs://"):
        if args.command == "worker":
            return _run_queue_worker(args, config)
        return _scan(args, config)
    if str(args.queue).startswith(("postgresql://", "postgres://")):
        if args.command == "worker":
            return _run_queue_worker(args, config, postgres=True)
        return _scan(args, config)
    if not str(args.queue).startswith(("rq://", "rqs://")):
        raise ConfigurationError(
            f"{args.command} needs an rq://, sqs:// or postgresql:// --queue, not {args.queue!r}"
        )
    if args.command == "worker":
        from fxdurable.workers.rq_worker import run_worker

        return run_worker(
            config,
            burst=args.burst,
            scan_interval_s=args.scan_interval,
            name=args.name,
            fork=not args.no_fork,
            connect_timeout_s=args.connect_timeout,
        )
    return _scan(args, config)


def _positive_seconds(text: str) -> float:
    """``--every``: a pause of 0 (or less) would scan in a loop without one, reading every
    active session as fast as the store answers."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not seconds > 0:  # also refuses nan
        raise argparse.ArgumentTypeError(
            f"{text} s would scan without a pause: give more than 0, or omit --every for one scan"
        )
    return seconds


def _scan(args: argparse.Namespace, config: WorkerConfig) -> int:
    """``fxdurable scan``: once, or ``--every`` SECONDS until stopped, onto RQ or SQS."""
    from fxdurable.runtime.worker import WorkerSettings
    from fxdurable.workers.scan import scan_once, scan_target, sweep_once

    wake, queue_down = scan_target(config.queue_url)
    outage: tuple[type[Exception], ...] = (StoreError, *queue_down)
    # One scan is an operator's "wake everything now"; repeated scans leave a session nobody
    # holds alone while its wake may still be queued.
    quiet_s = WorkerSettings.from_env().scan_quiet_s if args.every is not None else 0.0
    stop = threading.Event()
    if args.every is not None:
        # "Until stopped": Ctrl-C or SIGTERM ends the wait between scans (a scan under way
        # finishes first), and the command exits 0 without a traceback.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda _signum, _frame: stop.set())
    while True:
        try:
            found = scan_once(config.store_url, wake, quiet_s=quiet_s)
            # The retention sweep (docs/erasure.md "Retention"): said only when it erased.
            swept = sweep_once(config.store_url)
        except outage as exc:
            if args.every is None:
                raise
            # Repeating scans ride out a store or queue outage, like the workers beside them:
            # the next scan finds whatever this one missed.
            print(f"scan failed ({exc}); retrying in {args.every:g}s", file=sys.stderr, flush=True)
        else:
            print(f"woke {found} session(s)", flush=True)
            if swept.erased:
                print(f"erased {len(swept.erased)} session(s) past retention", flush=True)
        if args.every is None or stop.wait(args.every):
            return 0


def _run_queue_worker(
    args: argparse.Namespace, config: WorkerConfig, *, postgres: bool = False
) -> int:
    given = (
        ("--name", args.name),
        ("--no-fork", args.no_fork),
        ("--connect-timeout", args.connect_timeout is not None),
    )
    rq_only = [flag for flag, value in given if value]
    if rq_only:
        raise ConfigurationError(
            f"{' and '.join(rq_only)} apply to RQ workers only (an SQS or Postgres worker "
            "never forks, and has no Redis to wait for)"
        )
    from fxdurable.workers.queue_worker import QueueBackend, run_queue_worker

    backend: QueueBackend
    if postgres:  # boto3 is never imported on this path: fxdurable[postgres] is enough
        from fxdurable.workers.postgres_worker import POSTGRES as backend
    else:
        from fxdurable.workers.sqs_worker import SQS as backend
    return run_queue_worker(
        config,
        backend,
        burst=args.burst,
        scan_interval_s=args.scan_interval,
        concurrency=args.concurrency,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        if args.command in ("worker", "scan", "serve"):
            _export_app_dir(args.app_dir)
        if args.command == "demo":
            from fxdurable.cli.demo import run_demo

            return run_demo(
                crash_at=args.crash_at,
                directory=args.dir,
                budget_s=args.invocation_budget,
                provider=args.provider,
                store_url=args.store,
                queue_url=args.queue,
            )
        if args.command == "serve":
            from fxdurable.cli.serve import run_serve

            check_crash_at()
            return run_serve(
                host=args.host,
                port=args.port,
                agents=args.agents,
                store=args.store,
                queue=args.queue,
                dev=args.dev,
                tokens_file=args.tokens_file,
                invocation_budget_s=args.invocation_budget,
                verbose=args.verbose,
                demo=args.demo,
                db=args.db,
            )
        if args.command in ("worker", "scan"):
            check_crash_at()  # a typo fails here, not in a job later
            return _run_worker_command(args)
        if args.command == "schedule":
            from fxdurable.cli import schedule

            return schedule.run(args)
        if args.command in ("init", "stage"):
            from fxdurable.cli import lambda_project

            return lambda_project.run(args)
        if args.command == "erase":
            from fxdurable.cli import erase as erase_cli

            return erase_cli.run(args)
        if args.command == "migrate":
            from fxdurable.cli import migrate

            return migrate.run(args)
        store = _open_existing(args.db, args.store)
        try:
            if args.command == "trace":
                from fxdurable.cli.trace import print_trace

                return print_trace(store, args.session)
            if args.command == "workspace":
                return _export_workspace(store, args.session, args.directory)
            from fxdurable.cli.check import run_check

            return run_check(store, at_rest=args.at_rest, blobs=args.blobs)
        finally:
            store.close()
    except FxDurableError as exc:
        print(f"fxdurable: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return _reader_gone()


def _reader_gone() -> int:
    """stdout's reader went away (``fxdurable trace ... | head``): stop quietly, with the
    status a shell gives a command killed by SIGPIPE. stdout is pointed at /dev/null first,
    or the interpreter's own flush at exit would fail on the closed pipe again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
