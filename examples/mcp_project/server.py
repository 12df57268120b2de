"""A deploy service as an MCP server (the SDK's FastMCP, over stdio).

``deploy`` is destructive: each call appends one line to ``deploys.txt`` (the version and the
``fxdurable/execution_id`` the call carried in its ``_meta``). ``list_deploys`` is read-only.
"""

from __future__ import annotations

from pathlib import Path

from mcp.server.fastmcp import Context, FastMCP
from mcp.types import ToolAnnotations

DEPLOYS = Path(__file__).resolve().with_name("deploys.txt")
server = FastMCP("deploys", log_level="WARNING")


@server.tool(annotations=ToolAnnotations(destructiveHint=True))
def deploy(version: str, ctx: Context) -> str:  # type: ignore[type-arg]
    """Deploy a version to production."""
    meta = ctx.request_context.meta
    execution_id = (meta.model_extra or {}).get("fxdurable/execution_id") if meta else None
    with DEPLOYS.open("a") as f:
        f.write(f"{version}\t{execution_id}\n")
    return f"deployed {version}"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def list_deploys() -> str:
    """The versions deployed so far, oldest first."""
    lines = DEPLOYS.read_text().splitlines() if DEPLOYS.exists() else []
    return "\n".join(line.split("\t")[0] for line in lines) or "(none)"


if __name__ == "__main__":
    server.run("stdio")
