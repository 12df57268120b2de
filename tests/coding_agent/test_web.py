"""The coding agent's page backend end to end over HTTP, with real processes (a server and its
demo worker) and the scripted model: what the page (fxdurable/console/static) is built on.

Each test drives the routes the UI contract names (docs/coding-agent.md): a session's own copy
of the project, "Fix the failing tests" to passing tests, the crash button pressed while an
edit is held open, plan mode, "don't ask again" across a SIGKILL, steering, and a fork.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from coding_support import BUGGY, FIXED, TEMPLATE_CART
from web_support import CodingServer, Line, edit_results, lines, until

from examples.coding_agent.task import CARRY_ON, EMPTY_CART_STEER, EMPTY_CART_TEST, TASK

CART = "shop/cart.py"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CodingServer]:
    served = CodingServer(tmp_path_factory.mktemp("coding-ui"))
    yield served
    served.stop()


@pytest.fixture(autouse=True)
def gate_open(server: CodingServer) -> Iterator[None]:
    server.open_gate()
    yield
    server.open_gate()  # a failed test leaves no edit held for the next


def _cart(server: CodingServer, session: str) -> str:
    return (server.workspace(session) / CART).read_text()


def _grant_shell_at_the_prompt(
    c: httpx.Client, session: str, feed: Iterator[Line], seen: list[Line]
) -> None:
    """Read up to the first shell prompt and answer it "Yes, and don't ask again": the grant
    is recorded in the session's state, and the waiting question answered with it."""
    until(feed, seen, "input.requested", "shell")
    granted = c.post(f"/coding/sessions/{session}/allowed-tools", json={"tool": "shell"}).json()
    assert granted["answered"] is True and granted["allowedTools"] == ["shell"], granted


def test_fix_the_failing_tests_in_the_sessions_own_copy_then_fork_before_the_first_edit(server):
    c = server.client
    kinds = {t["name"]: t["kind"] for a in c.get("/agents").json()["agents"] for t in a["tools"]}
    assert kinds["edit_file"] == "diff" and kinds["shell"] == "terminal"
    assert kinds["explore"] == "subagent" and kinds["todo_write"] == "todo"
    # Before its first tool call a session's files panel is the project's, all unchanged.
    files = c.get("/coding/sessions/fix/files").json()["files"]
    assert {f["path"]: f["status"] for f in files}[CART] == "unchanged"
    # No grant before the session's first turn: it has no record (and no state) yet.
    assert c.get("/coding/sessions/fix/settings").json()["allowedTools"] == []
    early = c.post("/coding/sessions/fix/allowed-tools", json={"tool": "shell"})
    assert (early.status_code, early.json()["code"]) == (404, "session_not_found")

    with c.stream("POST", "/chat", json={"sessionId": "fix", "prompt": TASK}) as stream:
        feed, seen = lines(stream), []
        _grant_shell_at_the_prompt(c, "fix", feed, seen)
        seen += list(feed)
    assert seen[-1]["type"] == "turn_end" and seen[-1]["data"]["outcome"] == "completed"
    assert [s["type"] for s in seen].count("input.requested") == 1  # the grant answered the rest
    assert c.get("/sessions/fix").json()["state"]["allowed_tools"] == ["shell"]
    done = server.project_tests("fix")
    assert done.returncode == 0 and "Ran 6 tests" in done.stderr, done.stderr
    # Each edit's result carries the diff made at the edit: one per fix.
    diffs = edit_results(seen)
    assert len(diffs) == 2
    for diff, bug, fixed in zip(diffs, BUGGY, FIXED, strict=True):
        summary, _, body = diff.partition("\n")
        assert summary == "edited shop/cart.py: replaced 1 occurrence"
        assert body.startswith("--- a/shop/cart.py\n+++ b/shop/cart.py\n@@ ")
        assert f"\n-        {bug}\n" in body + "\n" and f"\n+        {fixed}\n" in body + "\n"
    # The files panel marks the change; the project itself is untouched.
    panel = {f["path"]: f["status"] for f in c.get("/coding/sessions/fix/files").json()["files"]}
    assert panel[CART] == "modified" and panel["tests/test_cart.py"] == "unchanged"
    one = c.get(f"/coding/sessions/fix/files/{CART}").json()
    assert one["status"] == "modified" and one["original"] == TEMPLATE_CART.read_text()
    assert [TEMPLATE_CART.read_text().count(b) for b in BUGGY] == [1, 1]
    # The calls route gives each call's input; the subagent's names its child session.
    calls = server.calls("fix")
    explore = next(x for x in calls if x["tool"] == "explore")
    assert explore["kind"] == "subagent" and explore["childSession"]
    child = c.get(f"/sessions/{explore['childSession']}/history")
    assert child.status_code == 200 and child.json()["messages"]
    shells = [x["arguments"]["command"] for x in calls if x["tool"] == "shell"]
    assert shells == ["python3 -m unittest -q"] * 2

    # A fork from just before the first edit works in a copy of its own.
    first_edit = next(
        s["cursor"]
        for s in seen
        if s["type"] == "tool.started" and s["data"]["tool"] == "edit_file"
    )
    fork = c.post("/sessions/fix/fork", json={"newSessionId": "fix-fork", "after": first_edit - 1})
    assert fork.status_code == 201, fork.text
    # The grant was given before the first edit: it is in the state the fork copied.
    assert c.get("/coding/sessions/fix-fork/settings").json()["allowedTools"] == ["shell"]
    source_cart = _cart(server, "fix")
    with c.stream("POST", "/chat", json={"sessionId": "fix-fork", "prompt": CARRY_ON}) as stream:
        forked = list(lines(stream))
    assert forked[-1]["data"]["outcome"] == "completed", [s["type"] for s in forked]
    assert "input.requested" not in [s["type"] for s in forked]
    assert server.workspace("fix-fork") != server.workspace("fix")
    assert server.project_tests("fix-fork").returncode == 0
    assert [_cart(server, "fix-fork").count(f) for f in FIXED] == [1, 1]
    assert _cart(server, "fix") == source_cart  # the source's copy is not the fork's
    assert len(edit_results(forked)) == 2  # the fork made its own edits, on its own copy


def test_a_sigkill_mid_edit_is_recovered_each_fix_applied_and_its_diff_recorded_once(server):
    """The crash button pressed while ``edit_file`` is held open; "don't ask again", chosen
    at the first shell prompt, still holds for the worker that takes over."""
    c = server.client
    server.close_gate()
    before = server.arrived()
    with c.stream("POST", "/chat", json={"sessionId": "crash", "prompt": TASK}) as stream:
        feed, seen = lines(stream), []
        asked = until(feed, seen, "input.requested", "shell")
        assert asked["data"]["question"] == "Run `python3 -m unittest -q` in the workspace?"
        granted = c.post("/coding/sessions/crash/allowed-tools", json={"tool": "shell"}).json()
        assert granted["answered"] is True and granted["allowedTools"] == ["shell"]
        until(feed, seen, "tool.started", "edit_file")
        server.wait_for_an_edit(before)
        worker = c.get("/demo").json()["worker"]
        crash = c.post("/demo/crash")
        assert crash.status_code == 200 and crash.json()["killed"] == worker
        server.open_gate()
        seen += list(feed)  # the same stream: the server stayed up
    types = [s["type"] for s in seen]
    assert types[-1] == "turn_end" and seen[-1]["data"]["outcome"] == "completed", types
    assert "attempt.interrupted" in types, types
    assert types.count("input.requested") == 1, "the grant did not survive the SIGKILL"
    text = _cart(server, "crash")
    assert [text.count(f) for f in FIXED] == [1, 1] and [text.count(b) for b in BUGGY] == [0, 0]
    edits = [x for x in server.calls("crash") if x["tool"] == "edit_file"]
    assert len(edits) == 2 and edits[0]["runs"] == 2, edits  # the held one ran again
    # Each fix's diff line is recorded once, in the one result of its call.
    recorded = edit_results(seen)
    assert [sum(f"+        {f}" in r for r in recorded) for f in FIXED] == [1, 1]
    assert server.project_tests("crash").returncode == 0
    # Visible and revocable: the next shell call would ask again.
    revoked = c.delete("/coding/sessions/crash/allowed-tools/shell").json()
    assert revoked["allowedTools"] == []
    assert c.get("/sessions/crash").json()["state"]["allowed_tools"] == []


def test_the_grant_routes_refuse_what_they_cannot_record(server):
    """422 for a body or a tool name that is not one, 404 for a session with no record."""
    c = server.client
    for body in ({"tool": "rm -rf"}, {"tool": ""}, {"tool": "shell", "also": 1}, {}):
        bad = c.post("/coding/sessions/crash/allowed-tools", json=body)
        assert (bad.status_code, bad.json()["code"]) == (422, "invalid_body"), (body, bad.text)
    bad_name = c.delete("/coding/sessions/crash/allowed-tools/no%20such")
    assert (bad_name.status_code, bad_name.json()["code"]) == (422, "invalid_tool")
    for verb, path in (("POST", "allowed-tools"), ("DELETE", "allowed-tools/shell")):
        body = {"tool": "shell"} if verb == "POST" else None
        missing = c.request(verb, f"/coding/sessions/nobody-here/{path}", json=body)
        assert (missing.status_code, missing.json()["code"]) == (404, "session_not_found")
    assert c.get("/sessions/nobody-here").status_code == 404


def test_plan_mode_refuses_a_change_until_the_plan_is_approved(server):
    c = server.client
    on = c.put("/coding/sessions/plan/plan-mode", json={"on": True}).json()
    assert on["planMode"] is True
    with c.stream("POST", "/chat", json={"sessionId": "plan", "prompt": TASK}) as stream:
        feed, seen = lines(stream), []
        first = until(feed, seen, "input.requested", "exit_plan_mode")
        refused = [s for s in seen if s["type"] == "tool.failed" and s["data"]["tool"] == "shell"]
        assert refused and refused[0]["data"]["result"].startswith("denied: plan mode is on")
        assert "1. Run the tests" in first["data"]["question"]
        assert _cart(server, "plan") == TEMPLATE_CART.read_text()  # nothing changed yet
        no = c.post("/sessions/plan/answer", json={"answer": "deny", "reason": "add a step"})
        assert no.status_code == 200, no.text
        second = until(feed, seen, "input.requested", "exit_plan_mode")
        assert "Revised after your feedback: add a step" in second["data"]["question"]
        assert _cart(server, "plan") == TEMPLATE_CART.read_text()
        assert c.post("/sessions/plan/answer", json={"answer": "allow"}).status_code == 200
        _grant_shell_at_the_prompt(c, "plan", feed, seen)
        seen += list(feed)
    assert seen[-1]["data"]["outcome"] == "completed", [s["type"] for s in seen]
    assert c.get("/coding/sessions/plan/settings").json()["planMode"] is False
    state = c.get("/sessions/plan").json()["state"]
    assert state["plan"]["approved"] is True and "Revised" in state["plan"]["text"]
    assert server.project_tests("plan").returncode == 0


def test_steering_mid_turn_adds_the_empty_cart_test(server):
    c = server.client
    server.close_gate()
    before = server.arrived()
    with c.stream("POST", "/chat", json={"sessionId": "steer", "prompt": TASK}) as stream:
        feed, seen = lines(stream), []
        _grant_shell_at_the_prompt(c, "steer", feed, seen)
        until(feed, seen, "tool.started", "edit_file")
        server.wait_for_an_edit(before)
        steered = c.post("/steer", json={"sessionId": "steer", "text": EMPTY_CART_STEER})
        assert steered.status_code == 200 and steered.json()["steered"] is True, steered.text
        server.open_gate()
        seen += list(feed)
    assert seen[-1]["data"]["outcome"] == "completed", [s["type"] for s in seen]
    assert "steer.delivered" in [s["type"] for s in seen]
    done = server.project_tests("steer")
    assert done.returncode == 0 and "Ran 7 tests" in done.stderr, done.stderr
    assert EMPTY_CART_TEST in (server.workspace("steer") / "tests" / "test_cart.py").read_text()
