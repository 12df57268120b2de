"""The coding agent's scripted policy, a pure function of the conversation: given what the
tools said, what it asks next. The conversations are played against a copy of the example
project (files read, edited and tested for real), so the policy's edits are checked by the
project's own tests, not by matching strings. Plan mode is played as the page's permission
hook plays it: a changing tool refused with its words until ``exit_plan_mode`` is called."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from examples.coding_agent.agent import CHANGING_TOOLS
from examples.coding_agent.policy import WANDER_PATH, coding_policy
from examples.coding_agent.task import (
    CART,
    EMPTY_CART_TEST,
    PLAN_MODE_DENIAL,
    TASK,
    TEST_COMMAND,
    TESTS,
)
from examples.coding_agent.tools import EXIT_PLAN_MODE, PLAN_APPROVED
from fxdurable.core.records import ToolCallRequest
from fxdurable.runtime.decide import refusal_message, unknown_message
from fxdurable.runtime.models.base import ChatMessage, ModelRequest, ModelResponse, ToolSpec

PROJECT = Path(__file__).resolve().parents[2] / "examples" / "coding_agent" / "project"
CODER_TOOLS = ("explore", "todo_write", "read_file", "glob_files", "grep_files", "edit_file")
CODER_TOOLS += ("write_file", "shell", EXIT_PLAN_MODE)

Result = Callable[[ToolCallRequest], str]


def _specs(names: tuple[str, ...]) -> list[ToolSpec]:
    return [ToolSpec(name=n, description=n, parameters={"type": "object"}) for n in names]


class World:
    """The coder's conversation, with tool results from a real copy of the project."""

    def __init__(self, root: Path) -> None:
        self.root = root / "ws"
        shutil.copytree(PROJECT, self.root)
        self.messages: list[ChatMessage] = [ChatMessage(role="user", text=TASK)]
        self.calls: list[ToolCallRequest] = []
        self.overrides: dict[int, str] = {}  # call number -> the result to give instead
        self.plan_mode = False  # on: changing tools refused until exit_plan_mode is called

    def ask(self) -> ModelResponse:
        return coding_policy(
            ModelRequest(instructions="", messages=self.messages, tools=_specs(CODER_TOOLS))
        )

    def step(self) -> ModelResponse:
        """One model call and its tools' results."""
        response = self.ask()
        calls = tuple(
            ToolCallRequest(
                name=c.name, arguments=c.arguments, provider_id=f"call_{len(self.calls) + n}"
            )
            for n, c in enumerate(response.tool_calls)
        )
        self.messages.append(ChatMessage(role="assistant", text=response.text, tool_calls=calls))
        for c in calls:
            result = self.overrides.pop(len(self.calls), None) or self.execute(c)
            self.calls.append(c)
            self.messages.append(
                ChatMessage(role="tool", text=result, tool_call_id=c.provider_id, tool_name=c.name)
            )
        return response

    def run(self, limit: int = 40) -> ModelResponse:
        for _ in range(limit):
            response = self.step()
            if not response.tool_calls:
                return response
        raise AssertionError("the policy never answered")

    def execute(self, c: ToolCallRequest) -> str:
        args = json.loads(c.arguments)
        if self.plan_mode and c.name in CHANGING_TOOLS:
            return f"denied: {PLAN_MODE_DENIAL}"
        if c.name == EXIT_PLAN_MODE:
            self.plan_mode = False  # the person approved the plan
            return PLAN_APPROVED
        if c.name == "explore":
            return "The cart is shop/cart.py; its tests are tests/test_cart.py."
        if c.name == "todo_write":
            return "\n".join(f"[{t['status']}] {t['task']}" for t in args["todos"])
        if c.name == "read_file":
            if ".." in args["path"]:
                return f"PathRefusedError: {args['path']!r} is outside the workspace: refused"
            lines = (self.root / args["path"]).read_text().splitlines()
            return "\n".join(f"{n:>6}\t{line}" for n, line in enumerate(lines, 1))
        if c.name == "edit_file":
            path = self.root / args["path"]
            text = path.read_text()
            if args["old_text"] not in text:
                return f"EditError: old_text not found in {args['path']}; read the file again"
            path.write_text(text.replace(args["old_text"], args["new_text"], 1))
            return f"edited {args['path']}: replaced 1 occurrence"
        if c.name == "shell":
            assert args["command"] == TEST_COMMAND
            done = subprocess.run(
                [sys.executable, "-m", "unittest", "-q"],
                cwd=self.root,
                capture_output=True,
                text=True,
                check=False,
            )
            return f"exit code: {done.returncode}\n{done.stdout}{done.stderr}"
        raise AssertionError(f"unexpected tool {c.name}")

    def steer(self, text: str) -> None:
        self.messages.append(ChatMessage(role="user", text=text))

    def tools(self) -> list[str]:
        return [c.name for c in self.calls]

    def args(self, tool: str) -> list[dict[str, object]]:
        return [json.loads(c.arguments) for c in self.calls if c.name == tool]

    def tests_pass(self) -> bool:
        done = subprocess.run(
            [sys.executable, "-m", "unittest", "-q"], cwd=self.root, capture_output=True
        )
        return done.returncode == 0


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def test_a_clean_run_explores_wanders_plans_tests_reads_fixes_and_answers(world: World) -> None:
    answer = world.run()
    assert world.tools() == [
        "explore",
        "read_file",  # outside the workspace: refused
        "todo_write",
        "shell",
        "read_file",
        "edit_file",
        "edit_file",
        "shell",
        "todo_write",
    ]
    assert world.tests_pass()
    assert "All 6 tests pass" in answer.text
    assert [a["path"] for a in world.args("read_file")] == [WANDER_PATH, CART]
    assert all(t["status"] == "completed" for t in world.args("todo_write")[-1]["todos"])
    # Each fix its own edit, with the old text exactly as read (no line numbers).
    old = [str(a["old_text"]) for a in world.args("edit_file")]
    assert all("\t" not in o and o in (PROJECT / CART).read_text() for o in old)


def test_in_plan_mode_the_refused_edit_is_made_once_the_plan_is_approved(world: World) -> None:
    world.plan_mode = True
    answer = world.run()
    assert world.tools()[3:9] == [
        "shell",  # refused: plan mode
        "read_file",
        "edit_file",  # refused: plan mode
        EXIT_PLAN_MODE,
        "shell",
        "edit_file",  # the same edit, made now
    ]
    refused, *made = world.args("edit_file")
    assert made[0] == refused and len(made) == 2
    assert world.tests_pass() and "All 6 tests pass" in answer.text


def test_refused_outside_the_workspace_it_says_so_and_stays_inside(world: World) -> None:
    world.step()  # explore
    world.step()  # the wander
    plan = world.step()
    assert f"`{WANDER_PATH}` is outside the workspace and was refused" in plan.text
    world.run()
    outside = [a for a in world.args("read_file") if str(a["path"]).startswith("..")]
    assert len(outside) == 1


@pytest.mark.parametrize("interrupted", ["unknown", "unknown-then-refused"])
def test_a_test_run_whose_outcome_is_unknown_is_run_again(world: World, interrupted: str) -> None:
    world.overrides[3] = unknown_message("shell")  # the first test run
    if interrupted == "unknown-then-refused":
        world.overrides[4] = refusal_message("shell")
    answer = world.run()
    runs = [a["command"] for a in world.args("shell")]
    assert runs == [TEST_COMMAND] * (4 if interrupted == "unknown-then-refused" else 3)
    assert world.tests_pass() and "tests pass" in answer.text


def test_an_edit_reported_already_applied_counts_as_done(world: World) -> None:
    for _ in range(6):  # through the first edit
        world.step()
    assert world.tools()[-1] == "edit_file"
    last = world.messages[-1]
    world.messages[-1] = ChatMessage(
        role="tool",
        text=f"{last.text} (already applied; not applied again)",
        tool_call_id=last.tool_call_id,
        tool_name="edit_file",
    )
    following = world.step()
    assert following.tool_calls[0].name == "edit_file"  # the second fix, no re-read
    first, second = world.args("edit_file")
    assert first != second
    world.run()
    assert world.tests_pass()


def test_old_text_not_found_sends_it_back_to_read_the_file(world: World) -> None:
    """A crash may have applied the edit already: the policy reads the file again and goes
    on from what it finds, never editing twice."""
    for _ in range(5):  # through reading the cart
        world.step()
    first_fix = world.ask().tool_calls[0]
    args = json.loads(first_fix.arguments)
    cart = world.root / CART
    cart.write_text(cart.read_text().replace(args["old_text"], args["new_text"]))  # applied
    world.overrides[5] = f"EditError: old_text not found in {CART}; read the file again"
    world.step()  # the edit, "not found"
    reread = world.step()
    assert [c.name for c in reread.tool_calls] == ["read_file"]
    answer = world.run()
    assert world.tests_pass() and "tests pass" in answer.text
    assert cart.read_text().count("unit_price * qty") == 1


@pytest.mark.parametrize("when", [2, 6, 9])  # before the plan, mid-fix, after the final run
def test_a_steer_for_an_empty_cart_test_adds_it_and_runs_the_tests(world: World, when: int) -> None:
    for _ in range(when):
        world.step()
    world.steer("ALSO add one test for an EMPTY CART, please")
    answer = world.run()
    tests = (world.root / TESTS).read_text()
    assert tests.count(f"def {EMPTY_CART_TEST}(self):") == 1
    assert world.tests_pass()
    assert "All 7 tests pass" in answer.text and EMPTY_CART_TEST in answer.text
    last_todos = world.args("todo_write")[-1]["todos"]
    assert {"task": "Add a test for an empty cart", "status": "completed"} in last_todos


def test_the_explore_subagent_globs_greps_and_answers() -> None:
    tools = _specs(("read_file", "glob_files", "grep_files"))
    messages = [ChatMessage(role="user", text="Find the cart.")]
    said = []
    for result in ("shop/cart.py\ntests/test_cart.py", "shop/cart.py:4:class Cart:", None):
        response = coding_policy(ModelRequest(instructions="", messages=messages, tools=tools))
        said.append([c.name for c in response.tool_calls])
        if result is None:
            break
        c = ToolCallRequest(
            name=response.tool_calls[0].name,
            arguments=response.tool_calls[0].arguments,
            provider_id=f"c{len(said)}",
        )
        messages += [
            ChatMessage(role="assistant", text=response.text, tool_calls=(c,)),
            ChatMessage(role="tool", text=result, tool_call_id=c.provider_id, tool_name=c.name),
        ]
    assert said == [["glob_files"], ["grep_files"], []]
    assert "shop/cart.py:4:class Cart:" in response.text
