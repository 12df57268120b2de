"""An MCP server's tools as durable fxdurable tools (``pip install 'fxdurable[mcp]'``).

``fx.mcp_tools(server)`` lists the server's tools once per process (when the agent is built)
and returns one :class:`~fxdurable.Tool` per tool, for ``fx.Agent(..., tools=[...])``:

- the replay policy comes from the tool's annotations: ``readOnlyHint`` → ``safe``,
  ``idempotentHint`` → ``idempotent``, anything else (``destructiveHint``, no hint) →
  ``unsafe``; ``policies={"name": "..."}`` overrides it per tool;
- each call carries the call's ids in its ``_meta`` (:data:`META_EXECUTION_ID` and the
  others below), so a server can deduplicate a retried call;
- a server lost mid-call: :mod:`fxdurable.tools.mcp_connection`;
- a result with ``isError`` raises :class:`~fxdurable.errors.MCPToolError`: the call fails
  and the model reads the server's message;
- the tool list is pinned per fxdurable session: the first call of a session that completes
  records, in the session's ``ctx.state`` (one :data:`STATE_PREFIX` key per tool), each listed
  tool's input schema digest and annotation policy; a later call, on any worker, whose tool
  differs from that record fails naming it (:class:`~fxdurable.errors.MCPToolChangedError`)
  before anything is sent. The check reads only the state the call already holds: no server
  round trip, and no store write once the list is recorded.

The ``mcp`` package is imported only when :func:`mcp_tools` is called: ``import fxdurable``
and ``import fxdurable.tools`` never load it. docs/mcp.md says what is and is not durable.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, cast

import pydantic

from fxdurable.errors import ConfigurationError, MCPToolChangedError, MCPToolError
from fxdurable.runtime.tools import REPLAY_POLICIES, ReplayPolicy, Tool, ToolContext, define_tool
from fxdurable.tools.mcp_connection import Connection, ServerSpec, connection, fingerprint

if TYPE_CHECKING:
    from mcp.types import CallToolResult
    from mcp.types import Tool as MCPTool

__all__ = [
    "META_ATTEMPT",
    "META_EXECUTION_ID",
    "META_SESSION_ID",
    "STATE_PREFIX",
    "MCPServer",
    "mcp_tools",
    "policy_of",
]

# The ``_meta`` keys of every call (MCP's "prefix/name" form; the prefix is ours).
# ``execution_id`` is the same on every run of one call, across crashes and workers: a server
# that records the ids it has done can skip a repeat (what ``idempotent`` relies on).
META_EXECUTION_ID = "fxdurable/execution_id"
META_SESSION_ID = "fxdurable/session_id"
META_ATTEMPT = "fxdurable/attempt"
# The session state key of each MCP tool the session's list pinned: STATE_PREFIX + the
# fxdurable tool name (unique within an agent, which a server's name is not). Its value:
# "<policy the annotations give> <digest of the input schema>" (a few dozen bytes a tool:
# the state is bounded at 64 KB and rewritten by every step).
STATE_PREFIX = "fxdurable/mcp/"

_INSTALL_HINT = "fxdurable.mcp_tools needs the MCP SDK: pip install 'fxdurable[mcp]'"
_NOT_A_NAME = re.compile(r"[^A-Za-z0-9_-]")


class MCPServer:
    """Where an MCP server is: :meth:`stdio` (a command this process starts) or :meth:`http`
    (a streamable HTTP endpoint). ``connect_timeout_s`` bounds starting, connecting and
    initializing (retried until then); ``call_timeout_s`` bounds one call's answer."""

    __slots__ = ("spec",)

    def __init__(self, spec: ServerSpec) -> None:
        self.spec = spec

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        name: str | None = None,
        connect_timeout_s: float = 10.0,
        call_timeout_s: float = 60.0,
    ) -> MCPServer:
        """A server this process starts as ``command *args`` and talks to over stdin/stdout.
        ``env`` is added to the SDK's default environment (which holds no credentials)."""
        return cls(
            ServerSpec(
                name=name or command.rsplit("/", 1)[-1],
                command=command,
                args=tuple(args),
                env=tuple(sorted(env.items())) if env is not None else None,
                cwd=cwd,
                connect_timeout_s=connect_timeout_s,
                call_timeout_s=call_timeout_s,
            )
        )

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
        connect_timeout_s: float = 10.0,
        call_timeout_s: float = 60.0,
    ) -> MCPServer:
        """A streamable HTTP server at ``url`` (for example ``http://127.0.0.1:8000/mcp``)."""
        return cls(
            ServerSpec(
                name=name or url,
                url=url,
                headers=tuple(sorted((headers or {}).items())),
                connect_timeout_s=connect_timeout_s,
                call_timeout_s=call_timeout_s,
            )
        )

    def __repr__(self) -> str:
        return f"MCPServer({self.spec.name!r})"


def policy_of(tool: MCPTool) -> ReplayPolicy:
    """The replay policy a tool's annotations ask for. ``readOnlyHint`` wins over the others;
    ``idempotentHint`` with ``destructiveHint`` is idempotent (repeating it does no more);
    without annotations a tool may do anything once: ``unsafe``."""
    hints = tool.annotations
    if hints is not None and hints.readOnlyHint:
        return "safe"
    if hints is not None and hints.idempotentHint:
        return "idempotent"
    return "unsafe"


def mcp_tools(
    server: MCPServer | str,
    *,
    policies: Mapping[str, ReplayPolicy] | None = None,
    include: Collection[str] | None = None,
    prefix: str = "",
) -> list[Tool]:
    """The tools ``server`` offers, as fxdurable tools. ``server``: an :class:`MCPServer`, or a
    URL (``http://`` / ``https://``: streamable HTTP). ``policies`` overrides the replay policy
    of the tools it names; ``include`` keeps only the tools it names; ``prefix`` goes before
    each tool's name (``"github_"``), so two servers' tools cannot clash. Characters a tool
    name may not have become ``_``.

    Lists the tools now, blocking (the server is started or connected once per process).
    Raises :class:`~fxdurable.errors.MCPConnectError` if it cannot be reached,
    :class:`~fxdurable.errors.ConfigurationError` for a name in ``policies`` or ``include``
    that the server does not offer, and ``ImportError`` without the ``mcp`` extra.
    """
    try:
        import mcp  # noqa: F401
    except ImportError as exc:
        raise ImportError(_INSTALL_HINT) from exc
    if isinstance(server, str):
        if not server.startswith(("http://", "https://")):
            raise ConfigurationError(
                f"mcp_tools({server!r}): a string is a streamable HTTP URL; "
                "for a command use fx.MCPServer.stdio(command, args)"
            )
        server = MCPServer.http(server)
    conn = connection(server.spec)
    offered = {t.name: t for t in conn.list_tools()}
    for label, names in (("policies", policies or {}), ("include", include or ())):
        missing = sorted(set(names) - set(offered))
        if missing:
            raise ConfigurationError(
                f"mcp_tools {label}: the MCP server {server.spec.name!r} offers no tool "
                f"{', '.join(map(repr, missing))}; it offers {', '.join(sorted(offered))}"
            )
    for name, policy in (policies or {}).items():
        if policy not in REPLAY_POLICIES:
            raise ConfigurationError(f"mcp_tools policies[{name!r}]: {policy!r} is not a policy")
    chosen = [t for name, t in sorted(offered.items()) if include is None or name in include]
    # What a session pins at its first completed call: the whole list this call took.
    pins = {STATE_PREFIX + _tool_name(prefix, t.name): pin_of(t) for t in chosen}
    return [_durable_tool(conn, t, (policies or {}).get(t.name), prefix, pins) for t in chosen]


def pin_of(tool: MCPTool) -> str:
    """What a session records of ``tool``: the policy its annotations give (not an override
    in ``policies=``: that is this code's choice, not the server's) and a digest of its input
    schema. Annotations that change no policy (a title) change no pin."""
    digest = hashlib.sha256(fingerprint(tool).encode()).hexdigest()[:16]
    return f"{policy_of(tool)} {digest}"


def _tool_name(prefix: str, mcp_name: str) -> str:
    return prefix + _NOT_A_NAME.sub("_", mcp_name)


class MCPArguments(pydantic.BaseModel):
    """A call's arguments: any JSON object that the tool's input schema accepts. The schema
    the model sees is the server's own, byte for byte (not one pydantic derives)."""

    model_config = pydantic.ConfigDict(extra="allow")
    mcp_schema: ClassVar[dict[str, Any]] = {"type": "object"}

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return cls.mcp_schema

    @pydantic.model_validator(mode="before")
    @classmethod
    def _check_schema(cls, data: Any) -> Any:
        import jsonschema  # type: ignore[import-untyped]  # a dependency of mcp (no stubs)

        try:
            jsonschema.validate(data, cls.mcp_schema)
        except jsonschema.ValidationError as exc:
            where = ".".join(str(p) for p in exc.absolute_path) or "input"
            raise ValueError(f"{where}: {exc.message}") from None
        return data


def _durable_tool(
    conn: Connection,
    listed: MCPTool,
    policy: ReplayPolicy | None,
    prefix: str,
    pins: Mapping[str, str],
) -> Tool:
    mcp_name = listed.name
    name = _tool_name(prefix, mcp_name)
    replay = policy or policy_of(listed)
    expected = fingerprint(listed)
    key = STATE_PREFIX + name
    model = cast(
        type[MCPArguments],
        pydantic.create_model(f"MCP_{_NOT_A_NAME.sub('_', mcp_name)}", __base__=MCPArguments),
    )
    model.mcp_schema = dict(listed.inputSchema)

    async def execute(arguments: pydantic.BaseModel, ctx: ToolContext) -> str:
        pinned = ctx.state.get(key)
        if pinned is not None and pinned != pins[key]:
            raise MCPToolChangedError(
                f"the MCP server {conn.spec.name!r} changed "
                f"{_difference(pinned, pins[key], mcp_name)} since this session first used "
                "its tools; the call was not sent (a new session takes the new list)"
            )
        meta = {
            META_EXECUTION_ID: ctx.execution_id,
            META_SESSION_ID: ctx.session_id,
            META_ATTEMPT: ctx.attempt,
        }
        result = await conn.call(
            mcp_name,
            arguments.model_dump(mode="json"),
            meta=meta,
            expected=expected,
            # A lost call runs again only where running it twice is what the policy allows.
            rerun=replay != "unsafe",
        )
        text = render(result, server=conn.spec.name)
        # Pin the list at the session's first completed call (the write commits with this
        # result): only the tools not pinned yet, so a pin once written never moves.
        for other, pin in pins.items():
            if other not in ctx.state:
                ctx.state[other] = pin
        return text

    spec = conn.spec
    return define_tool(
        name,
        description=listed.description or listed.title or mcp_name,
        input_model=model,
        execute=execute,
        replay=replay,
        # Past the MCP timeouts (connect, then a rerun's connect and call): ours fire first,
        # with the clearer error.
        timeout_s=2 * (spec.connect_timeout_s + spec.call_timeout_s) + 5,
    )


def _difference(pinned: object, now: str, tool: str) -> str:
    """What changed between a session's pin of ``tool`` and this worker's, in words."""
    was = str(pinned).split(" ")
    policy, _ = now.split(" ")
    if len(was) == 2 and was[0] != policy:
        return f"the annotations of the tool {tool!r} (they give {policy!r}, not {was[0]!r})"
    return f"the input schema of the tool {tool!r}"


def render(result: CallToolResult, *, server: str) -> str:
    """A result as the text the model reads: the text parts, one per line; any other part as
    its JSON; the structured content when there is no text. ``isError`` raises."""
    parts: list[str] = []
    for item in result.content:
        if item.type == "text":
            parts.append(item.text)
        else:
            parts.append(item.model_dump_json(by_alias=True, exclude_none=True))
    if not parts and result.structuredContent is not None:
        parts.append(json.dumps(result.structuredContent, ensure_ascii=False))
    text = "\n".join(parts)
    if result.isError:
        raise MCPToolError(text or f"the MCP server {server!r} reported an error")
    return text
