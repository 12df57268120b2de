"""The subject of the fallback and spending-budget crash tests: one real process running one
turn of session ``s`` to rest (``FXD_CRASH_AT`` kills it at a crash point).

Run as ``python tests/crash/spend_driver.py --store URL --dir D --scenario fallback|budget``.
Every model call appends the name of the model called to ``D/models.log`` (a SIGKILL loses
nothing written there: each line is flushed by its own ``write``).

``fallback``: ``Agent(model=[primary, backup])``; the primary always answers 529-overloaded,
the backup calls ``note`` once and then answers ``done``. ``budget``: one model that calls
``note`` forever (3 output tokens a call) under ``SpendingBudget(turn_output_tokens=10)``.
Prints ``outcome {json}`` once the submission settles.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pydantic

import fxdurable as fx
from fxdurable.errors import ModelOverloadedError
from fxdurable.runtime.models.base import Finish, ModelRequest, TextDelta
from fxdurable.runtime.models.scripted import ScriptedModel, turn_messages
from fxdurable.runtime.spend import SpendingBudget

SESSION = "s"
REQUEST = "spend-1"


class Note(pydantic.BaseModel):
    text: str


@fx.tool(replay="safe")
def note(args: Note) -> str:
    return "noted"


class Logged:
    """``inner`` (or, with ``overloaded``, a 529 on every call), each call logged by name."""

    def __init__(self, name: str, log: Path, inner: ScriptedModel | None) -> None:
        self._name, self._log, self._inner = name, log, inner

    @property
    def name(self) -> str:
        return self._name

    async def stream(self, request: ModelRequest) -> AsyncIterator[TextDelta | Finish]:
        fd = os.open(self._log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, f"{self._name}\n".encode())
        finally:
            os.close(fd)
        if self._inner is None:
            raise ModelOverloadedError("primary is overloaded (HTTP 529)")
        async for part in self._inner.stream(request):
            yield part


def build_agent(scenario: str, workdir: Path) -> fx.Agent:
    log = workdir / "models.log"
    if scenario == "fallback":

        def backup_policy(request: ModelRequest) -> fx.ModelResponse:
            if any(m.role == "tool" for m in turn_messages(request)):
                return fx.reply("done")
            return fx.reply("", fx.call("note", text="x"))

        primary = Logged("primary", log, None)
        backup = Logged("backup", log, ScriptedModel(backup_policy))
        return fx.Agent("spend", [primary, backup], tools=[note])
    looper = ScriptedModel(lambda request: fx.reply("once more", fx.call("note", text="y")))
    return fx.Agent(
        "spend",
        Logged("looper", log, looper),
        tools=[note],
        spending=SpendingBudget(turn_output_tokens=10),
    )


async def main_async(args: argparse.Namespace) -> int:
    workdir = Path(args.dir)
    agent = build_agent(args.scenario, workdir)
    settings = fx.WorkerSettings(lease_ttl_s=1.0, heartbeat_s=0.2, scan_interval_s=0.2)
    async with fx.Runtime([agent], store=args.store, settings=settings) as rt:
        handle = rt.session(SESSION)
        sub = await handle.submit("go", request_id=REQUEST)  # idempotent on a rerun
        done = await handle.wait(sub.id, timeout=30)
    error = None if done.error is None else {"code": done.error.code, "msg": done.error.message}
    result = {"status": str(done.status), "text": done.result, "error": error}
    print("outcome " + json.dumps(result))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--scenario", choices=("fallback", "budget"), required=True)
    return asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())
