"""The scripted model of the coding agent: a pure function from the conversation to the next
response, reacting to what the tools said the way a real model would (never a fixed list).

The coder (a request that offers the ``explore`` tool):

1. delegates a look around to the ``explore`` subagent;
2. wanders once: it asks for a file one directory up, is refused, says so and stays inside;
3. writes a todo list (``todo_write``);
4. runs the tests through ``shell`` and reads the failures from the output;
5. reads ``shop/cart.py`` and fixes each bug with its own ``edit_file`` call, the old text
   copied from what it read (the ``cat -n`` line numbers stripped);
6. runs the tests again, updates the todo list and answers.

In plan mode (the page's: a changing tool is refused, saying so) the refused test run sends
it to read the cart and try its first fix, as a model would; that edit refused too, it
presents its plan with ``exit_plan_mode`` and, once the person approved it, carries on where
it was refused (the refused edit changed nothing, so the same edit is made then); a plan the
person turned down is revised with their reason, at most ``MAX_PLANS`` times.

What it believes a file holds is the last read of it plus the edits that succeeded since, so
recovery reads like a model's: an edit reported as already applied counts as done; an edit
that failed ("old_text not found": a crash may have applied it already) sends it back to
read the file; a test run whose outcome is unknown is run again (tests change nothing). A
steering message mentioning an empty cart adds ``test_empty_cart_total_is_zero`` to the tests.

The explore subagent (a request without ``edit_file``) globs, greps, and answers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fxdurable.core.records import ToolCallRequest
from fxdurable.runtime.models.base import (
    ChatMessage,
    ModelRequest,
    ModelResponse,
    without_interruptions,
)
from fxdurable.runtime.models.scripted import call, reply, turn_messages

from .task import CART, EMPTY_CART_TEST, PLAN_MODE_DENIAL, TEST_COMMAND, TESTS

__all__ = ["coding_policy"]

# Outside the workspace: where a model looking for project settings might look first.
WANDER_PATH = "../pyproject.toml"
# Past this many test runs the policy gives up instead of looping.
MAX_TEST_RUNS = 8
# Past this many plans turned down, the policy stops and says so.
MAX_PLANS = 3
EXIT_PLAN_MODE = "exit_plan_mode"

_NUMBERED = re.compile(r"^\s*\d+\t(.*)$")
_EXIT = re.compile(r"exit code: (-?\d+)")
_FAILED_TEST = re.compile(r"^(?:FAIL|ERROR): (\w+)", re.M)
_RAN = re.compile(r"Ran (\d+) tests?")


@dataclass(frozen=True, slots=True)
class Step:
    """One tool call of the conversation and its result (None: not answered yet)."""

    position: int  # index of the assistant message that asked for it
    tool: str
    args: dict[str, object]
    result: str | None


@dataclass(frozen=True, slots=True)
class Fix:
    """One edit the coder wants: what it says, and the edit_file arguments."""

    says: str
    path: str
    old_text: str
    new_text: str


def coding_policy(request: ModelRequest) -> ModelResponse:
    """The coder's or the explore subagent's next response, by the tools it is offered."""
    tools = {t.name for t in request.tools}
    if "edit_file" not in tools:
        return _explore(request)
    return _Coder(without_interruptions(request.messages)).next()


# -- the explore subagent ----------------------------------------------------------------------


def _explore(request: ModelRequest) -> ModelResponse:
    results = [m for m in turn_messages(request) if m.role == "tool"]
    if not results:
        return reply("Listing the project's Python files.", call("glob_files", pattern="**/*.py"))
    if len(results) == 1:
        return reply(
            "Looking for the classes and functions in them.",
            call("grep_files", pattern=r"^\s*(class|def) \w+", glob="**/*.py"),
        )
    files, definitions = results[0].text.strip(), results[-1].text.strip()
    return reply(
        f"Python files:\n{files}\n\nDefinitions:\n{definitions}\n\n"
        f"The cart is `{CART}` (Cart.add, subtotal, apply_discount, total); its tests are in "
        f"`{TESTS}`."
    )


# -- the coder ---------------------------------------------------------------------------------


class _Coder:
    """The facts of one conversation, and the first goal they leave unmet."""

    def __init__(self, messages: Sequence[ChatMessage]) -> None:
        self.messages = list(messages)
        self.steps = _steps(self.messages)
        users = [i for i, m in enumerate(self.messages) if m.role == "user"]
        # A steer is any user message after the task; this policy knows one request.
        self.steered_at = next(
            (i for i in users[1:] if "empty cart" in self.messages[i].text.lower()), None
        )

    # The goals, in order; each returns a response when it is not met yet.
    def next(self) -> ModelResponse:
        for goal in (
            self._explore,
            self._wander,
            self._plan,
            self._plan_approval,
            self._first_test_run,
            self._replan_after_steer,
            self._fix_cart,
            self._add_empty_cart_test,
            self._final_test_run,
            self._close_todos,
        ):
            response = goal()
            if response is not None:
                return response
        return self._answer()

    def _explore(self) -> ModelResponse | None:
        if self._calls("explore"):
            return None
        return reply(
            "I'll get an overview of the project first.",
            call(
                "explore",
                task="Find the shopping cart code and its tests in this project: which files, "
                "and which classes and functions they define.",
            ),
        )

    def _wander(self) -> ModelResponse | None:
        if any(str(s.args.get("path", "")).startswith("..") for s in self.steps):
            return None
        return reply(
            "Let me check whether a pyproject.toml one directory up configures the tests.",
            call("read_file", path=WANDER_PATH),
        )

    def _plan(self) -> ModelResponse | None:
        if self._calls("todo_write"):
            return None
        return reply(
            self._wander_note() + "My plan:",
            call("todo_write", todos=self._todos()),
        )

    def _plan_approval(self) -> ModelResponse | None:
        """After a refusal for plan mode: the plan, until the person approved one."""
        denials = [s.position for s in self.steps if _refused_for_plan_mode(s.result)]
        if not denials:
            return None
        plans = [s for s in self._calls(EXIT_PLAN_MODE) if s.position > denials[-1]]
        if plans and plans[-1].result is not None and not plans[-1].result.startswith("denied"):
            return None  # approved (or plan mode was off after all)
        turned_down = [s.result for s in plans if s.result]
        if len(turned_down) >= MAX_PLANS:
            return reply(f"My plan was turned down {len(turned_down)} times; stopping here.")
        plan = "\n".join(f"{n}. {t['task']}" for n, t in enumerate(self._todos(), start=1))
        if not plans and not any(
            _refused_for_plan_mode(s.result) for s in self._calls("edit_file")
        ):
            # The tests refused: look for the bugs by reading, and try the first fix.
            looked = self._edit(CART, _cart_fixes, "I can't run the tests; reading the cart.")
            if looked is not None:
                return looked
        if turned_down:
            reason = turned_down[-1].removeprefix("denied:").strip()
            plan += f"\n\nRevised after your feedback: {reason}"
            says = "I revised the plan after your feedback."
        else:
            says = "Plan mode is on, so here is my plan for your approval."
        return reply(says, call(EXIT_PLAN_MODE, plan=plan))

    def _wander_note(self) -> str:
        wander = next(s for s in self.steps if str(s.args.get("path", "")).startswith(".."))
        refused = re.search(r"refus|outside|escape|not allowed", wander.result or "", re.I)
        if refused:
            return f"`{WANDER_PATH}` is outside the workspace and was refused; I'll stay inside. "
        return "Nothing useful outside the project; I'll stay inside the workspace. "

    def _first_test_run(self) -> ModelResponse | None:
        if self._test_runs():
            return None
        return reply("Running the tests to see what fails.", self._run_tests())

    def _replan_after_steer(self) -> ModelResponse | None:
        if self.steered_at is None:
            return None
        if any(s.position > self.steered_at for s in self._calls("todo_write")):
            return None
        return reply(
            "Noted: I'll also add a test for an empty cart.",
            call("todo_write", todos=self._todos()),
        )

    def _fix_cart(self) -> ModelResponse | None:
        if self._passed_since_last_edit():
            return None
        return self._unfinished_test_run() or self._edit(CART, _cart_fixes, "Reading the cart.")

    def _add_empty_cart_test(self) -> ModelResponse | None:
        if self.steered_at is None:
            return None
        return self._edit(TESTS, _empty_cart_test, "Reading the tests before adding one.")

    def _final_test_run(self) -> ModelResponse | None:
        if self._passed_since_last_edit():
            return None
        runs = self._test_runs()
        if len(runs) >= MAX_TEST_RUNS:
            return None  # the answer says it gave up
        return self._unfinished_test_run() or reply("Running the tests again.", self._run_tests())

    def _close_todos(self) -> ModelResponse | None:
        writes = self._calls("todo_write")
        todos = self._todos()
        if not self._passed_since_last_edit() or (writes and writes[-1].args.get("todos") == todos):
            return None
        return reply("Updating the todo list.", call("todo_write", todos=todos))

    def _answer(self) -> ModelResponse:
        last = self._test_runs()[-1]
        if not self._passed_since_last_edit():
            failing = ", ".join(_FAILED_TEST.findall(last.result or "")) or "see the output"
            return reply(
                f"I could not make the tests pass after {len(self._test_runs())} runs; "
                f"still failing: {failing}."
            )
        ran = _RAN.search(last.result or "")
        count = f"All {ran.group(1)} tests pass" if ran else "The tests pass"
        extra = (
            f" I also added `{EMPTY_CART_TEST}`, and an empty cart totals 0."
            if self.steered_at is not None
            else ""
        )
        return reply(
            f"{count}. Two bugs in `{CART}`: `subtotal()` ignored each line's quantity, and "
            f"`total()` subtracted the discount as an amount instead of a percentage.{extra}"
        )

    # -- the shell -----------------------------------------------------------------------------

    def _run_tests(self) -> ToolCallRequest:
        return call("shell", command=TEST_COMMAND)

    def _test_runs(self) -> list[Step]:
        """The test runs asked for, but those plan mode refused (they never ran)."""
        return [
            s
            for s in self._calls("shell")
            if "unittest" in str(s.args.get("command")) and not _refused_for_plan_mode(s.result)
        ]

    def _unfinished_test_run(self) -> ModelResponse | None:
        """A response for a last test run that has no output to read: interrupted (unknown),
        refused as a blind repeat, or denied by the person asked."""
        runs = self._test_runs()
        result = runs[-1].result if runs else None
        if result is None or _EXIT.search(result):
            return None
        if result.startswith("Refused"):
            return reply(
                "Running tests changes nothing in the workspace, so repeating it is safe: "
                "running them again, deliberately.",
                self._run_tests(),
            )
        if "may or may not have completed" in result:
            return reply(
                "The test run was interrupted and its outcome is unknown. Running tests only "
                "reads the code, so I'll run them again.",
                self._run_tests(),
            )
        if result.startswith("denied"):
            return reply(f"I was not allowed to run the tests ({result}); stopping here.")
        return reply("The test run ended without a result; running it again.", self._run_tests())

    def _passed_since_last_edit(self) -> bool:
        edits = [s.position for s in self._calls("edit_file")]
        last_edit = max(edits, default=-1)
        return any(s.position > last_edit and _exit_code(s.result) == 0 for s in self._test_runs())

    # -- files ---------------------------------------------------------------------------------

    def _edit(
        self, path: str, fixes_of: Callable[[str], list[Fix]], read_says: str
    ) -> ModelResponse | None:
        """Read ``path`` if what it holds is not known; else the first fix it still needs."""
        content = self._believed(path)
        if content is None:
            return reply(read_says, call("read_file", path=path))
        fixes = fixes_of(content)
        if not fixes:
            return None
        fix = fixes[0]
        return reply(
            fix.says,
            call("edit_file", path=fix.path, old_text=fix.old_text, new_text=fix.new_text),
        )

    def _believed(self, path: str) -> str | None:
        """What ``path`` holds as far as the conversation shows: its last read, plus the
        edits that succeeded since; None when unknown (never read, or an edit since failed,
        so the file may not be what the model thinks)."""
        content: str | None = None
        for step in self.steps:
            if step.args.get("path") != path or step.result is None:
                continue
            if step.tool == "read_file":
                read = _read_content(step.result)
                if read is not None:
                    content = read
            elif step.tool == "edit_file" and content is not None:
                if _refused_for_plan_mode(step.result):
                    continue  # refused before it ran: the file is as it was
                if _edited(step.result):
                    old, new = str(step.args.get("old_text")), str(step.args.get("new_text"))
                    content = content.replace(old, new, 1)
                else:
                    content = None  # e.g. "old_text not found": read it again
        return content

    def _todos(self) -> list[dict[str, str]]:
        items = [
            ("Run the tests and read the failures", bool(self._test_runs())),
            (f"Fix the bugs in {CART}, one edit per bug", self._cart_fixed()),
        ]
        if self.steered_at is not None:
            tests = self._believed(TESTS)
            items.append(("Add a test for an empty cart", bool(tests and EMPTY_CART_TEST in tests)))
        items.append(("Re-run the tests until they pass", self._passed_since_last_edit()))
        todos, current = [], False
        for task, done in items:
            status = "completed" if done else ("pending" if current else "in_progress")
            current = current or not done
            todos.append({"task": task, "status": status})
        return todos

    def _cart_fixed(self) -> bool:
        content = self._believed(CART)
        return content is not None and not _cart_fixes(content)

    def _calls(self, tool: str) -> list[Step]:
        return [s for s in self.steps if s.tool == tool]


def _cart_fixes(content: str) -> list[Fix]:
    """The bugs still in the cart, as edits of the lines read (indentation kept)."""
    fixes = []
    for line in content.splitlines():
        if "sum(unit_price for" in line:
            fixed = line.replace("sum(unit_price for", "sum(unit_price * qty for").replace(
                "_qty in", "qty in"
            )
            fixes.append(
                Fix("subtotal() ignores the quantity; multiplying by it.", CART, line, fixed)
            )
        if "self.subtotal() - self.discount_percent" in line:
            fixed = line.replace(
                "self.subtotal() - self.discount_percent",
                "self.subtotal() * (1 - self.discount_percent / 100)",
            )
            fixes.append(
                Fix(
                    "total() subtracts the discount as an amount; it is a percentage.",
                    CART,
                    line,
                    fixed,
                )
            )
    return fixes


def _empty_cart_test(content: str) -> list[Fix]:
    """The empty-cart test, inserted after the last line of the test class."""
    if EMPTY_CART_TEST in content:
        return []
    lines = content.splitlines()
    main = next((i for i, ln in enumerate(lines) if ln.startswith("if __name__")), len(lines))
    anchor = max(i for i in range(main) if lines[i].strip())
    old = "\n".join(lines[anchor:main])
    method = f"\n\n    def {EMPTY_CART_TEST}(self):\n        self.assertEqual(Cart().total(), 0)\n"
    new = lines[anchor] + method + "\n".join(lines[anchor + 1 : main])
    return [Fix("Adding the empty-cart test to the test class.", TESTS, old, new)]


def _steps(messages: Sequence[ChatMessage]) -> list[Step]:
    """Each tool call with its result, paired by the provider's call id (else by order)."""
    asked: list[tuple[int, str | None, str, dict[str, object]]] = []
    results: dict[int, str] = {}
    for i, message in enumerate(messages):
        if message.role == "assistant":
            for c in message.tool_calls:
                asked.append((i, c.provider_id, c.name, _arguments(c.arguments)))
        elif message.role == "tool":
            n = next(
                (
                    n
                    for n, (_, pid, name, _) in enumerate(asked)
                    if n not in results
                    and (pid == message.tool_call_id if pid and message.tool_call_id else True)
                    and name == (message.tool_name or name)
                ),
                None,
            )
            if n is not None:
                results[n] = message.text
    return [Step(pos, name, args, results.get(n)) for n, (pos, _, name, args) in enumerate(asked)]


def _arguments(text: str) -> dict[str, object]:
    try:
        parsed = json.loads(text)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _read_content(result: str) -> str | None:
    """The file's text from a ``read_file`` result (``cat -n`` numbering stripped)."""
    lines = [m.group(1) for m in map(_NUMBERED.match, result.splitlines()) if m]
    return "\n".join(lines) if lines else None


def _edited(result: str) -> bool:
    """An edit that applied (now or, per the ledger, before a crash)."""
    return result.startswith("edited") or "already applied" in result


def _refused_for_plan_mode(result: str | None) -> bool:
    return result is not None and PLAN_MODE_DENIAL in result


def _exit_code(result: str | None) -> int | None:
    match = _EXIT.search(result or "")
    return int(match.group(1)) if match else None
