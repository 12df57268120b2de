"""The ``ops`` session's conversation as the SDK's ``Session`` reads it: ``DurableSession``
over the same store, one line per item (``python memory.py`` after ``ops_agent.py``). SDK code
that reads a session's memory reads the durable turns, whichever process ran them. Writing
into it is refused: a durable session's conversation is written by its turns only.
"""

from __future__ import annotations

import asyncio

from ops_agent import agent

import fxdurable as fx
from fxdurable.adapters.openai_agents import DurableSession, SessionReadOnlyError


def line(item: dict[str, object]) -> str:
    """``user: Deploy r1.``, ``function_call deploy``, ``function_call_output c1: ...``."""
    kind = str(item.get("type") or "message")
    if kind == "message":
        return f"{item['role']}: {item['content']}"
    if kind == "function_call":
        return f"function_call {item['name']}"
    return f"{kind} {item.get('call_id')}: {item.get('output')}"


async def main() -> None:
    async with fx.Runtime([agent], store="sqlite:///.fxd/ops.db") as rt:
        memory = DurableSession(rt.session("ops"))
        for item in await memory.get_items():
            print(line(dict(item)))
        try:
            await memory.add_items([{"role": "user", "content": "edited"}])
        except SessionReadOnlyError as exc:
            print(f"refused: {type(exc).__name__}")


if __name__ == "__main__":
    asyncio.run(main())
