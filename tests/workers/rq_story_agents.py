"""The agents the RQ worker tests run in real ``fxdurable worker`` processes.

:class:`rq_support.RqHarness` copies this file into the test's temporary directory (as
``fxd_rq_agents_<token>.py``) and puts that directory on the workers' ``PYTHONPATH``; the workers
load it with ``FXD_AGENTS=<module>:agents``. ``agents`` is a function, so every RQ work horse
calls it at the start of its job (``run_wake`` → ``load_agents``): that is where a crash plan
(below) arms or disarms the next crash.

Configuration comes from the environment of the worker:

- ``FXD_TEST_WORLD``: the outside world's directory (its logs: ``tests.kit.story``);
- ``FXD_TEST_TOOL_S`` (every tool), ``FXD_TEST_READ_S`` (read_state), ``FXD_TEST_DEPLOY_S``
  (deploy, before its effect), ``FXD_TEST_TICK_S`` (tick): how long each tool takes
  (:class:`tests.kit.story.Timings`);
- ``FXD_TEST_AGENTS_DELAY_S``: how long :func:`agents` takes (a slow application import);
- ``FXD_TEST_MAX_ATTEMPTS``: the agent's attempt budget (``fx.Durability.max_attempts``);
- ``FXD_TEST_ASK_BEFORE``: a tool the agent's ``before_tool`` hook asks a person about
  (``fx.ask``; every call is logged to ``hooks.log``: ``tests.kit.story.asking_hook``);
  ``FXD_TEST_ASK_TIMEOUT_S``: the question expires after that long (denied);
- ``FXD_TEST_SUBAGENTS=1``: the agent also declares the ``research`` subagent
  (``tests.kit.delegation``, prompts ``delegate <tag>`` and ``delegate2 <tag>``);
  ``FXD_TEST_CHILD_BARRIER=1``: its children meet at the researcher's barrier;
- ``FXD_TEST_PARALLEL_TOOLS=0``: the agent runs the calls of a response one after the other;
- ``FXD_TEST_WEBHOOK_URL``: the agent's settlement webhook (``fx.Webhook``, the secret
  ``webhook_support.SECRET``), its first retry ``FXD_TEST_WEBHOOK_BACKOFF_S`` after a failure;
- ``FXD_TEST_CRASH_PLAN`` (``point[:tool],point[:tool],...``) with ``FXD_TEST_CRASH_LOG`` (the
  worker's stderr, where :func:`fxdurable.core.crash.crash_point` writes "crash injected at";
  or the stderr of each worker of a pool, ``os.pathsep``-separated, counted together):
  the k-th job after k injected crashes runs with ``FXD_CRASH_AT`` set to the plan's k-th entry,
  and every job after the plan is spent runs without it. So the RQ parent that survives its
  SIGKILLed horse recovers the session itself, as it would in production, instead of crashing
  again on every reconciliation wake.

The agent is the crash suites' story agent (``tests.kit.story``), prompted ``story <tag>``
(it charges order ``<tag>``, deploys release ``<tag>`` and ends with ``done_text(<tag>)``),
``status?`` or ``ticks <n> <tag>``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import fxdurable as fx
from tests.kit.story import Timings, asking_hook, story_agent
from tests.kit.world_env import world_from_env
from tests.webhook_support import SECRET as WEBHOOK_SECRET

AGENT = "rq-agent"  # not an agent: what ``FXD_AGENTS=<module>:AGENT`` must refuse
CRASH_MARK = "crash injected at"


def _seconds(name: str) -> float:
    return float(os.environ.get(name) or 0.0)


def arm_crash_plan() -> None:
    """Set ``FXD_CRASH_AT`` for this job from the crash plan and the crashes already logged."""
    plan = [p for p in os.environ.get("FXD_TEST_CRASH_PLAN", "").split(",") if p]
    if not plan:
        return
    # Several logs (os.pathsep-separated): a plan of a pool, each crash on whichever worker.
    logs = [Path(p) for p in os.environ.get("FXD_TEST_CRASH_LOG", "").split(os.pathsep) if p]
    done = sum(p.read_text(errors="replace").count(CRASH_MARK) for p in logs if p.exists())
    if done < len(plan):
        os.environ["FXD_CRASH_AT"] = plan[done]
    else:
        os.environ.pop("FXD_CRASH_AT", None)


def agents() -> list[fx.Agent]:
    """``FXD_AGENTS=<module>:agents``: called by every work horse at the start of its job (and
    once by the RQ parent at startup). ``FXD_TEST_AGENTS_DELAY_S`` makes it slow, as loading a
    real application can be."""
    arm_crash_plan()
    time.sleep(_seconds("FXD_TEST_AGENTS_DELAY_S"))
    world = world_from_env()
    timings = Timings(
        tool_s=_seconds("FXD_TEST_TOOL_S"),
        read_s=_seconds("FXD_TEST_READ_S"),
        deploy_s=_seconds("FXD_TEST_DEPLOY_S"),
        tick_s=_seconds("FXD_TEST_TICK_S"),
    )
    attempts = os.environ.get("FXD_TEST_MAX_ATTEMPTS")
    durability = fx.Durability(max_attempts=int(attempts)) if attempts else None
    ask_before = os.environ.get("FXD_TEST_ASK_BEFORE")
    timeout = os.environ.get("FXD_TEST_ASK_TIMEOUT_S")
    expires = float(timeout) if timeout else None
    hook = asking_hook(world, ask_before, expires) if ask_before else None
    url = os.environ.get("FXD_TEST_WEBHOOK_URL")
    backoff = _seconds("FXD_TEST_WEBHOOK_BACKOFF_S") or 2.0
    webhook = fx.Webhook(url=url, secret=WEBHOOK_SECRET, backoff_s=backoff) if url else None
    return [
        story_agent(
            world,
            timings=timings,
            durability=durability,
            before_tool=hook,
            subagents=os.environ.get("FXD_TEST_SUBAGENTS") == "1",  # the research subagent
            barrier=os.environ.get("FXD_TEST_CHILD_BARRIER") == "1",
            parallel_tools=os.environ.get("FXD_TEST_PARALLEL_TOOLS") != "0",
            webhook=webhook,
        )
    ]
