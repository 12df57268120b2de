"""The worker process of ``fxdurable serve --dev --demo``: runs the turns the server admits.

``python -m fxdurable.cli.demo_worker --store URL --agents SPEC`` is an ordinary runtime on the
server's store, with its in-process queue fed by its own reconciliation scan every 0.2 s
(:mod:`fxdurable.http.demo_mode` says why). It stops at a step boundary on SIGTERM or SIGINT,
and dies with the server (Linux: ``PR_SET_PDEATHSIG``), so a server killed any way leaves no
worker behind to race the next one.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence

from fxdurable.runtime.agent_spec import load_agents
from fxdurable.runtime.models.announce import announce_model_endpoints
from fxdurable.runtime.runtime import Runtime
from fxdurable.runtime.worker import WorkerSettings

__all__ = ["SCAN_INTERVAL_S", "main"]

# How soon the worker finds new work: a prompt, steering, an answer, a crashed turn.
SCAN_INTERVAL_S = 0.2


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when the server that started it dies."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    parent = os.getppid()
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the server died before the request took effect
        os._exit(137)


async def _run(store: str, agents: str) -> None:
    settings = WorkerSettings(
        lease_ttl_s=10.0, heartbeat_s=2.0, scan_interval_s=SCAN_INTERVAL_S, scan_quiet_s=0.0
    )
    loaded = load_agents(agents)
    announce_model_endpoints(loaded, process="demo worker")
    async with Runtime(loaded, store=store, queue="local", settings=settings) as rt:
        rt.install_signal_handlers()
        while not rt.stop_requested:
            await asyncio.sleep(0.1)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fxdurable.cli.demo_worker", description=__doc__)
    parser.add_argument("--store", required=True, help="the server's store URL")
    parser.add_argument("--agents", required=True, help="module:attribute naming the agents")
    args = parser.parse_args(argv)
    _die_with_parent()
    logging.basicConfig(level=logging.INFO, format="demo worker %(process)d: %(message)s")
    logging.getLogger("fxdurable").info("running turns from %s", args.store)
    asyncio.run(_run(args.store, args.agents))
    return 0


if __name__ == "__main__":
    sys.exit(main())
