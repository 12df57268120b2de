"""The subject of the typed-answer and paused-turn crash tests: one real process, one session.

Run as ``python tests/crash/answers_driver.py --store URL --dir D --case typed|pause``, with
``FXD_CRASH_AT`` set to kill it at a crash point. Each run submits the same request (request
id ``answers-1``, session ``answers``) as a client retrying its POST would, runs the session
to rest and prints ``outcome {json}`` (status, text, output, error code).

``typed``: an agent with ``output_type=Rating`` on the in-process scripted model, whose first
answer of a turn does not validate (a string where an integer belongs) and whose answer after
the rejection note does. ``pause``: an Anthropic model pointed at the scripted wire server
(started in this process, so a SIGKILL takes it down too), whose first response pauses the
turn after a server tool ran in a container; the server refuses a continuation that does not
send the paused content back or does not name the container. Every request the policy serves
is logged to ``D/model.log`` (``[prompt, round, pid]``); on a clean exit the server's
requests go to ``D/http.jsonl`` (one line per process: ``{"pid", "requests": [{"status",
"body"}]}``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

import pydantic

import fxdurable as fx
from fxdurable.runtime.models import AnthropicModel
from fxdurable.runtime.models.base import REJECTED_ANSWER_HEADING
from fxdurable.testing import ScriptedModelServer
from tests.kit.story import logged_requests
from tests.kit.world import SETTLED

SESSION = "answers"
REQUEST = "answers-1"
PROMPT = "Rate the release."
INVALID = '{"score": "high", "reason": "it shipped"}'
VALID = '{"score": 8, "reason": "it shipped"}'
PAUSED_TEXT = "Searching the release notes."
CONTINUED_TEXT = " It shipped on time."


class Rating(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    score: int
    reason: str


def typed_policy(request: fx.ModelRequest) -> fx.ModelResponse:
    rejected = any(m.text.startswith(REJECTED_ANSWER_HEADING) for m in request.messages)
    return fx.reply(VALID if rejected else INVALID)


def pause_policy(request: fx.ModelRequest) -> fx.ModelResponse:
    if request.messages[-1].role == "assistant":  # the paused turn, sent back: it goes on
        return fx.ModelResponse(text=CONTINUED_TEXT)
    return fx.ModelResponse(text=PAUSED_TEXT, stop_reason="pause_turn")


async def run(args: argparse.Namespace) -> int:
    workdir = Path(args.dir)
    server: ScriptedModelServer | None = None
    if args.case == "typed":
        model: fx.ScriptedModel | AnthropicModel = fx.ScriptedModel(
            logged_requests(workdir, typed_policy)
        )
        agent = fx.Agent("rater", model, output_type=Rating)
    else:
        server = ScriptedModelServer(logged_requests(workdir, pause_policy)).start()
        model = AnthropicModel("claude-x", base_url=server.anthropic_base_url, api_key="k")
        agent = fx.Agent("searcher", model)
    try:
        return await run_session(args, agent)
    finally:
        if server is not None:
            requests = [{"status": r.status, "body": r.body} for r in server.requests]
            with (workdir / "http.jsonl").open("a") as out:
                out.write(json.dumps({"pid": os.getpid(), "requests": requests}) + "\n")
            server.stop()


async def run_session(args: argparse.Namespace, agent: fx.Agent) -> int:
    settings = fx.WorkerSettings(lease_ttl_s=5.0, heartbeat_s=0.5, scan_interval_s=0.2)
    async with fx.Runtime([agent], store=args.store, settings=settings) as rt:
        handle = rt.session(SESSION)
        sub = await handle.submit(PROMPT, request_id=REQUEST)
        deadline = time.monotonic() + args.timeout
        while True:
            current = await handle.submission(sub.id)
            assert current is not None
            if current.status in SETTLED:
                break
            if time.monotonic() > deadline:
                print(f"timed out waiting for {sub.id} to settle", file=sys.stderr)
                return 3
            await asyncio.sleep(0.05)
    outcome = {
        "status": str(current.status),
        "text": current.result,
        "output": None if current.output is None else current.output.model_dump(),
        "error": None if current.error is None else current.error.code,
    }
    print("outcome " + json.dumps(outcome), flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--case", choices=("typed", "pause"), required=True)
    parser.add_argument("--timeout", type=float, default=40.0)
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
