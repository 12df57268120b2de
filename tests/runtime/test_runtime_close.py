"""Closing a Runtime that owns its store must not pull the store out from under journal calls
still running in worker threads (a cancelled ``asyncio.to_thread`` call keeps running).

Runs in a subprocess: the failure mode is the interpreter dying (SIGSEGV in sqlite3), which
would otherwise take the whole test session down with it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    import fxdurable as fx

    async def once(directory, n):
        agent = fx.Agent("eng", fx.ScriptedModel([fx.reply("hi")]))
        settings = fx.WorkerSettings(heartbeat_s=0.0005, lease_ttl_s=5, scan_interval_s=0.001)
        url = f"sqlite:///{directory}/x{n}.db?synchronous=NORMAL"
        async with fx.Runtime([agent], store=url, settings=settings) as rt:
            assert await rt.session("s").run("go", timeout=5) == "hi"

    for n in range(int(sys.argv[2])):
        asyncio.run(once(sys.argv[1], n))
    print("ok")
    """
)


def test_closing_a_runtime_with_heartbeats_and_scans_in_flight_does_not_crash(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", SCRIPT, str(tmp_path), "150"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, (
        f"exit {proc.returncode} (-11 is SIGSEGV)\n{proc.stdout}\n{proc.stderr[-3000:]}"
    )
    assert proc.stdout.strip().endswith("ok")
