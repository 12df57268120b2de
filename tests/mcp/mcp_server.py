"""A real MCP server (the SDK's FastMCP) whose tools carry each annotation; the tests' world.

Run as ``python tests/mcp/mcp_server.py WORLD`` (stdio) or ``... WORLD --http PORT``
(streamable HTTP at ``http://127.0.0.1:PORT/mcp``). Every call appends
``<tool> <execution_id> <args>`` to ``WORLD/calls.log``, the ``_meta`` execution id fxdurable
sent; the effects: ``WORLD/effects.log`` (``deploy``, once per call that ran),
``WORLD/flags.log`` (``set_flag``, once per execution id: the server deduplicates). A
redeployed server: ``WORLD/hidden`` names tools it no longer offers; with ``WORLD/changed``
its ``deploy`` takes a ``region`` too (a changed input schema); with ``WORLD/reannotated``
``set_flag`` loses its ``idempotentHint`` (changed annotations). Each ``tools/list`` request
appends a line to ``WORLD/lists.log``.

A tool blocks mid-call (after its effect, before its answer) when ``WORLD/block-<tool>``
exists and ``WORLD/blocked-<tool>`` does not: it writes its pid to ``blocked-<tool>`` and
sleeps until it is killed, so a test can kill the worker or the server at that moment. The
next run of the tool (a re-run, after a new server started) no longer blocks.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import anyio
from mcp.server.fastmcp import Context, FastMCP
from mcp.types import ToolAnnotations

parser = argparse.ArgumentParser()
parser.add_argument("world", type=Path)
parser.add_argument("--http", type=int, default=None)
args = parser.parse_args()
WORLD: Path = args.world

server = FastMCP("world", host="127.0.0.1", port=args.http or 8000, log_level="WARNING")


def _meta(ctx: Context) -> dict[str, object]:  # type: ignore[type-arg]
    meta = ctx.request_context.meta
    return dict(meta.model_extra or {}) if meta is not None else {}


def _log(name: str, line: str) -> None:
    with (WORLD / name).open("a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


async def _called(tool: str, ctx: Context, **kwargs: object) -> str:  # type: ignore[type-arg]
    execution_id = str(_meta(ctx).get("fxdurable/execution_id"))
    _log("calls.log", f"{tool} {execution_id} {json.dumps(kwargs, sort_keys=True)}")
    return execution_id


async def _maybe_block(tool: str) -> None:
    if (WORLD / f"block-{tool}").exists() and not (WORLD / f"blocked-{tool}").exists():
        (WORLD / f"blocked-{tool}").write_text(str(os.getpid()))
        await anyio.sleep(3600)


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def read_status(service: str, ctx: Context) -> str:  # type: ignore[type-arg]
    """Read a service's status."""
    await _called("read_status", ctx, service=service)
    await _maybe_block("read_status")
    return f"{service}: ok"


@server.tool(annotations=ToolAnnotations(idempotentHint=True, destructiveHint=False))
async def set_flag(name: str, value: bool, ctx: Context) -> str:  # type: ignore[type-arg]
    """Set a feature flag (deduplicated on the execution id)."""
    execution_id = await _called("set_flag", ctx, name=name, value=value)
    done = (WORLD / "flags.log").read_text().split() if (WORLD / "flags.log").exists() else []
    if execution_id not in done:
        _log("flags.log", execution_id)
    await _maybe_block("set_flag")
    return f"{name}={value}"


@server.tool(annotations=ToolAnnotations(destructiveHint=True))
async def deploy(version: str, ctx: Context) -> str:  # type: ignore[type-arg]
    """Deploy a version to production."""
    execution_id = await _called("deploy", ctx, version=version)
    _log("effects.log", f"deploy {version} {execution_id}")
    await _maybe_block("deploy")
    return f"deployed {version}"


@server.tool()
async def restart(service: str, ctx: Context) -> str:  # type: ignore[type-arg]
    """Restart a service (no annotations: may do anything)."""
    await _called("restart", ctx, service=service)
    return f"restarted {service}"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def broken(ctx: Context) -> str:  # type: ignore[type-arg]
    """Always fails."""
    await _called("broken", ctx)
    raise RuntimeError("the disk is on fire")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def whoami(ctx: Context) -> str:  # type: ignore[type-arg]
    """The _meta of this call, as JSON."""
    return json.dumps(_meta(ctx), sort_keys=True)


async def deploy_to(version: str, region: str, ctx: Context) -> str:  # type: ignore[type-arg]
    """Deploy a version to one region (a redeployed ``deploy``: its input schema changed)."""
    execution_id = await _called("deploy", ctx, version=version, region=region)
    _log("effects.log", f"deploy {version} {execution_id}")
    return f"deployed {version} to {region}"


async def set_flag_unhinted(name: str, value: bool, ctx: Context) -> str:  # type: ignore[type-arg]
    """Set a feature flag (a redeployed ``set_flag``: no idempotentHint any more)."""
    await _called("set_flag", ctx, name=name, value=value)
    return f"{name}={value}"


async def _listed() -> list[object]:
    _log("lists.log", "tools/list")
    return list(await server.list_tools())


if __name__ == "__main__":
    # A redeployed server: the tools named in WORLD/hidden are no longer offered; with
    # WORLD/changed, deploy takes a region too.
    hidden = WORLD / "hidden"
    for name in hidden.read_text().split() if hidden.exists() else []:
        server.remove_tool(name)
    if (WORLD / "changed").exists():
        server.remove_tool("deploy")
        server.add_tool(deploy_to, name="deploy", annotations=ToolAnnotations(destructiveHint=True))
    if (WORLD / "reannotated").exists():
        server.remove_tool("set_flag")
        server.add_tool(set_flag_unhinted, name="set_flag")
    # Counted, so a test can tell how many round trips listing took.
    server._mcp_server.list_tools()(_listed)  # type: ignore[arg-type]
    (WORLD / "server.pid").write_text(str(os.getpid()))
    server.run("streamable-http" if args.http else "stdio")
