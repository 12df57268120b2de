"""The coding agent: the workspace tools, a todo list, an ``explore`` subagent that can only
read, and a permission prompt before every ``shell`` command.

``coder(workspace, model)`` builds it; ``agents()`` is for workers
(``FXD_AGENTS=examples.coding_agent.agent:agents``, run from the repository's root).
With ``settings`` (the page, :mod:`examples.coding_agent.web`) it also has plan mode
(``exit_plan_mode``) and honours "don't ask again", and its edits answer with their diff.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import pydantic

import fxdurable as fx
from fxdurable import tools as fxt
from fxdurable.errors import ConfigurationError
from fxdurable.runtime.models.base import Model
from fxdurable.runtime.tool_kinds import with_kind
from fxdurable.tools.workspace import Workspace

from .grants import granted
from .policy import coding_policy
from .settings import SessionSettings
from .task import PLAN_MODE_DENIAL, TEST_COMMAND
from .tools import EXIT_PLAN_MODE, diffing_edit_tools, exit_plan_mode_tool

__all__ = [
    "CHANGING_TOOLS",
    "PROJECT",
    "agents",
    "ask_before_shell",
    "coder",
    "explorer",
    "model_from_env",
    "page_permissions",
]

# The project each new session's workspace starts as: a copy of it.
PROJECT = Path(__file__).resolve().parent / "project"
# A current Claude model, for ANTHROPIC_API_KEY without FXD_CODING_MODEL.
ANTHROPIC_DEFAULT = "claude-sonnet-4-5"
OPENAI_DEFAULT = "gpt-4o-mini"

INSTRUCTIONS = f"""\
You are a careful coding agent. Your workspace is a small Python project (standard library
only). Every path you give a tool is relative to the workspace; nothing outside it is
reachable. Work like this:
- First ask the `explore` subagent for an overview of the project.
- Keep a todo list with `todo_write`, and update it as you go.
- Run the tests with `shell`, command `{TEST_COMMAND}`, and read the failures in its output.
- Read a file with `read_file` before you edit it. `read_file` numbers the lines like
  `cat -n`; the numbers and the tab after them are not part of the file: copy `old_text`
  for `edit_file` exactly from the text after the tab.
- Make one `edit_file` call per fix. Fix the code, not the tests.
- If a result says an operation was interrupted and its outcome is unknown, look at the
  current state (read the file, run the tests) before you repeat anything.
- When the tests pass, answer with a short summary of what was wrong and what you changed.
"""

PLAN_MODE_INSTRUCTIONS = f"""\
- The user may switch on plan mode: `edit_file`, `write_file` and `shell` are then refused
  ("denied: {PLAN_MODE_DENIAL}"). Then call `{EXIT_PLAN_MODE}` with your plan and wait for the
  user's approval before you change anything.
"""

EXPLORE_INSTRUCTIONS = """\
You explore a small Python project for another agent, reading only: list the files with
`glob_files`, search them with `grep_files`, read what matters with `read_file`. Answer with
the files and the definitions that matter for the task, briefly.
"""


class Todo(pydantic.BaseModel):
    task: str = pydantic.Field(description="what to do, in a few words")
    status: Literal["pending", "in_progress", "completed"]


class TodoInput(pydantic.BaseModel):
    todos: list[Todo] = pydantic.Field(description="the whole list, replacing the previous one")


def _todo_write(todos: TodoInput, ctx: fx.ToolContext) -> str:
    """The list goes into the session's state, committed with this call's result: a call
    re-executed after a crash writes the same list again (idempotent by construction)."""
    items = [t.model_dump() for t in todos.todos]
    ctx.state["todos"] = items
    marks = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}
    return "\n".join(f"{marks[t['status']]} {t['task']}" for t in items) or "(empty list)"


todo_write = with_kind(
    fx.define_tool(
        "todo_write",
        description="Write your todo list (the whole list, each item with its status).",
        input_model=TodoInput,
        execute=_todo_write,
        replay="idempotent",
    ),
    "todo",
)

# What plan mode refuses: every tool that can change the workspace.
CHANGING_TOOLS = frozenset({"edit_file", "write_file", "shell"})


def ask_before_shell(tool: str, arguments: str) -> fx.Ask | None:
    """A person decides every shell command (``session.answer(fx.allow() | fx.deny(...))``)."""
    if tool != "shell":
        return None
    try:
        command = json.loads(arguments).get("command", arguments)
    except (ValueError, AttributeError):
        command = arguments
    return fx.ask(f"Run `{command}` in the workspace?")


def page_permissions(settings: SessionSettings) -> Callable[..., fx.Ask | str | None]:
    """The page's ``before_tool``: the session's settings decide before the person is asked.
    In plan mode a changing tool is refused (the model reads why) and ``exit_plan_mode`` asks
    the person to approve the plan; out of it ``exit_plan_mode`` is refused. A ``shell``
    command asks, unless the person said "don't ask again" for shell in this session: a grant
    in the session's state (:mod:`.grants`), read from the call's ``state``."""

    def before_tool(tool: str, arguments: str, call: fx.ToolCall) -> fx.Ask | str | None:
        current = settings.of(call.session_id)
        if tool == EXIT_PLAN_MODE:
            if not current.plan_mode:
                return "plan mode is off: carry on with the task"
            try:
                plan = str(json.loads(arguments).get("plan", ""))
            except (ValueError, AttributeError):
                plan = arguments
            return fx.ask(f"Approve this plan?\n\n{plan}")
        if current.plan_mode and tool in CHANGING_TOOLS:
            return PLAN_MODE_DENIAL
        if tool in granted(call.state):
            return None
        return ask_before_shell(tool, arguments)

    return before_tool


def explorer(workspace: Workspace, model: Model | str) -> fx.Agent:
    """The read-only subagent: it sees its parent session's files."""
    return fx.Agent(
        "explorer",
        model,
        instructions=EXPLORE_INSTRUCTIONS,
        tools=fxt.read_only_tools(workspace),
    )


def coder(
    workspace: Workspace, model: Model | str, settings: SessionSettings | None = None
) -> fx.Agent:
    """The coder; with ``settings``, the page's: plan mode, "don't ask again", diffs."""
    explore = fx.subagent(
        explorer(workspace, model),
        name="explore",
        description="Hand a read-only exploration task (find files, definitions, usages) to "
        "a subagent; it answers with what it found.",
    )
    if settings is None:
        return fx.Agent(
            "coder",
            model,
            instructions=INSTRUCTIONS,
            tools=[*fxt.workspace_tools(workspace), todo_write, explore],
            before_tool=ask_before_shell,
        )
    tools = [
        *fxt.read_only_tools(workspace),
        *diffing_edit_tools(workspace),
        *fxt.workspace_tools(workspace)[-1:],  # shell
        todo_write,
        explore,
        exit_plan_mode_tool(settings),
    ]
    return fx.Agent(
        "coder",
        model,
        instructions=INSTRUCTIONS + PLAN_MODE_INSTRUCTIONS,
        tools=tools,
        before_tool=page_permissions(settings),
    )


def model_from_env() -> tuple[Model, str] | None:
    """The real model the environment names, and a line saying which; None for none:
    ``OPENAI_API_KEY`` (``FXD_CODING_MODEL``, default gpt-4o-mini; ``OPENAI_BASE_URL``
    honoured), ``ANTHROPIC_API_KEY`` (``FXD_CODING_MODEL``, default a current Claude), or
    ``OPENAI_BASE_URL`` without a key (a local OpenAI-compatible server such as Ollama;
    ``FXD_CODING_MODEL`` required).

    The OpenAI model reads its endpoint from the environment itself (never ``base_url=``), so
    what it says at startup (``model endpoints: ... (from OPENAI_BASE_URL; ...)``) and the
    line returned name the variable that chose it."""
    # Imported here: choosing the scripted model loads no httpx.
    from fxdurable.runtime.models.anthropic import AnthropicModel
    from fxdurable.runtime.models.endpoint import env_value
    from fxdurable.runtime.models.openai import OpenAIModel

    name = os.environ.get("FXD_CODING_MODEL")
    moved = next((v for v in OpenAIModel.base_url_envs if env_value(v)), None)
    if os.environ.get("OPENAI_API_KEY"):
        model = OpenAIModel(name or OPENAI_DEFAULT)
        if moved is None:
            return model, f"OpenAI {model.model} (OPENAI_API_KEY)"
        said = f"OpenAI {model.model} at {model.base_url}"
        return model, f"{said} (OPENAI_API_KEY; endpoint from {model.base_url_source})"
    if os.environ.get("ANTHROPIC_API_KEY"):
        name = name or ANTHROPIC_DEFAULT
        return AnthropicModel(name), f"Anthropic {name} (ANTHROPIC_API_KEY)"
    if moved:
        if not name:
            raise ConfigurationError(
                f"{moved} is set ({env_value(moved)}) without OPENAI_API_KEY: name the model "
                "the server runs in FXD_CODING_MODEL (e.g. FXD_CODING_MODEL=qwen2.5-coder:7b)"
            )
        model = OpenAIModel(name)
        return model, f"{name} at {model.base_url} ({model.base_url_source})"
    return None


def agents(model: Model | None = None) -> list[fx.Agent]:
    """For workers: the coder on ``$FXD_CODING_DIR/workspace`` (default ``.fxd-coding``), or,
    with ``FXD_CODING_WORKSPACE=stored``, on files kept in the store (any worker of a pool, on
    any host, carries a turn on with the same files); with ``model`` if given, else the
    environment's model, else the scripted policy in process."""
    workspace: Workspace
    if os.environ.get("FXD_CODING_WORKSPACE") == "stored":
        workspace = fxt.stored(PROJECT)
    else:
        workdir = Path(os.environ.get("FXD_CODING_DIR", ".fxd-coding"))
        workspace = fxt.directory(workdir / "workspace", template=PROJECT)
    if model is None:
        chosen = model_from_env()
        model = chosen[0] if chosen else fx.ScriptedModel(coding_policy, name="scripted/coder")
    return [coder(workspace, model)]
