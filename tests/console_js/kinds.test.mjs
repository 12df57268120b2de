import assert from "node:assert/strict";
import { test } from "node:test";

import { kindOf, kindsFromAgents, parseDiff, parseShell, todoList } from "../../fxdurable/console/static/kinds.js";
import { renderItem } from "../../fxdurable/console/static/render.js";
import { Timeline } from "../../fxdurable/console/static/timeline.js";
import { byTestId, findAll, textOf } from "../../fxdurable/console/static/vnode.js";

const EDIT_RESULT = [
  "edited shop/cart.py: replaced 1 occurrence",
  "--- a/shop/cart.py",
  "+++ b/shop/cart.py",
  "@@ -16,2 +16,2 @@",
  "     def subtotal(self):",
  "-        return sum(unit_price for _item, unit_price, _qty in self.lines)",
  "+        return sum(unit_price * qty for _item, unit_price, qty in self.lines)",
  "",
].join("\n");

const KINDS = kindsFromAgents({
  agents: [
    { name: "coder", tools: [
      { name: "edit_file", kind: "diff" }, { name: "shell", kind: "terminal" }, { name: "read_file", kind: "read" },
      { name: "todo_write", kind: "todo" }, { name: "explore", kind: "subagent" }, { name: "odd", kind: "hologram" },
      { name: "plain", kind: null },
    ] },
    { name: "explorer", tools: [{ name: "read_file", kind: "read" }] },
  ],
});

let at = 1_700_000_000;
const line = (cursor, type, data) => ({ cursor, type, sessionId: "c-1", turnId: "sub-1", at: (at += 1), data });
const started = (cursor, task, tool, run = 1) => line(cursor, "tool.started", { task, tool, round: cursor, index: 0, policy: "idempotent", run, execution_id: `e-${task}`, reason: run > 1 ? "recovery" : null });
const settled = (cursor, type, task, tool, result) => line(cursor, type, { task, tool, round: cursor, index: 0, result });

function timelineOf(lines, calls = []) {
  const t = new Timeline();
  t.setKinds(KINDS);
  t.setCalls(calls);
  for (const l of lines) t.ingest(l);
  return t;
}

const one = (node, id) => {
  const found = findAll(node, byTestId(id));
  assert.equal(found.length, 1, `one ${id}, found ${found.length}`);
  return found[0];
};

test("kinds come from GET /agents; an unknown kind is no kind", () => {
  assert.equal(kindOf(KINDS, "edit_file"), "diff");
  assert.equal(kindOf(KINDS, "odd"), null);
  assert.equal(kindOf(KINDS, "plain"), null);
  assert.equal(kindOf(new Map(), "edit_file"), null);
});

test("a recorded edit result parses into its summary and numbered hunk lines", () => {
  const diff = parseDiff(EDIT_RESULT);
  assert.equal(diff.summary, "edited shop/cart.py: replaced 1 occurrence");
  assert.equal(diff.newPath, "b/shop/cart.py");
  assert.equal(diff.hunks.length, 1);
  assert.deepEqual(
    diff.hunks[0].lines.map((l) => [l.sign, l.oldNo, l.newNo]),
    [[" ", 16, 16], ["-", 17, null], ["+", null, 17]],
  );
  assert.deepEqual(parseDiff("edit failed: old_text not found").hunks, []);
});

test("a shell result parses into its exit status and output", () => {
  assert.deepEqual(parseShell("exit code: 1\nFAILED tests/test_cart.py"), { exit: 1, status: "exit code: 1", output: "FAILED tests/test_cart.py" });
  assert.equal(parseShell("exit code: -9 (killed by SIGKILL)\n").exit, -9);
  assert.equal(parseShell("timed out after 120s\npartial").exit, null);
  assert.equal(parseShell("timed out after 120s\npartial").output, "partial");
});

test("an edit is one card with its diff: the settlement line adds nothing", () => {
  const input = { task: "t1", arguments: { path: "shop/cart.py", old_text: "a", new_text: "b" } };
  const t = timelineOf([started(1, "t1", "edit_file"), settled(2, "tool.completed", "t1", "edit_file", EDIT_RESULT)], [input]);
  const card = one(renderItem(t, 1), "tool-call");
  assert.equal(card.attrs["data-kind"], "diff");
  const diff = one(card, "diff");
  assert.match(diff.attrs["aria-label"], /shop\/cart\.py: 1 added, 1 removed/);
  const text = textOf(diff);
  assert.match(text, /-        return sum\(unit_price for/);
  assert.match(text, /\+        return sum\(unit_price \* qty/);
  assert.equal(renderItem(t, 2).attrs.hidden, true, "the settlement's own line is hidden");
  assert.match(textOf(card), /Tool edit_fileshop\/cart\.py/);
});

test("a shell call is a terminal: streamed output while it runs, then its exit status", () => {
  const input = { task: "t2", arguments: { command: "python -m unittest" } };
  const t = timelineOf([started(1, "t2", "shell")], [input]);
  t.ingest({ cursor: 1, type: "progress", sessionId: "c-1", turnId: "sub-1", at, data: { task: "t2", tool: "shell", text: "test_a ... ok\n" } });
  let term = one(renderItem(t, 1), "terminal");
  assert.match(textOf(term), /\$ python -m unittest/);
  assert.equal(textOf(one(term, "tool-progress")), "test_a ... ok\n");
  assert.match(textOf(one(term, "exit-status")), /running/);
  t.ingest(settled(2, "tool.completed", "t2", "shell", "exit code: 1\nFAILED (failures=2)"));
  term = one(renderItem(t, 1), "terminal");
  assert.equal(textOf(one(term, "terminal-output")), "FAILED (failures=2)");
  assert.equal(textOf(one(term, "exit-status")), "✗ exit 1");
  assert.equal(findAll(renderItem(t, 1), byTestId("tool-progress")).length, 0);
});

test("a read is collapsed with its path; its text opens on demand", () => {
  const t = timelineOf([started(1, "t3", "read_file"), settled(2, "tool.completed", "t3", "read_file", "     1\tclass Cart:\n     2\t    pass")], [{ task: "t3", arguments: { path: "shop/cart.py" } }]);
  const read = one(renderItem(t, 1), "read");
  assert.equal(read.tag, "details");
  assert.equal(read.attrs.open, undefined, "collapsed");
  assert.match(textOf(read.children[0]), /^shop\/cart\.py \(2 lines\)$/);
});

test("todo_write's card is the checklist, and its state commit is not a second line", () => {
  const todos = [{ task: "Run the tests", status: "completed" }, { task: "Fix subtotal", status: "in_progress" }, { task: "Fix discount", status: "pending" }];
  const t = timelineOf(
    [started(1, "t4", "todo_write"), settled(2, "tool.completed", "t4", "todo_write", "[x] Run the tests"), line(3, "state.changed", { set: { todos }, deleted: [], task: "t4", tool: "todo_write", step: null })],
    [{ task: "t4", arguments: { todos } }],
  );
  assert.deepEqual(t.todos, todos);
  const items = findAll(renderItem(t, 1), byTestId("todo"));
  assert.deepEqual(items.map((i) => i.attrs["data-status"]), ["completed", "in_progress", "pending"]);
  assert.match(textOf(items[1]), /Fix subtotal \(in progress\)/);
  assert.equal(renderItem(t, 3).attrs.hidden, true);
  assert.match(textOf(todoList([])), /No todos yet/);
});

test("a subagent call holds its child's collapsible transcript", () => {
  const t = timelineOf([started(1, "t5", "explore")], [{ task: "t5", arguments: { task: "Find the cart" }, childSession: "c-1.explore.1" }]);
  const sub = one(renderItem(t, 1), "subagent");
  assert.equal(sub.tag, "details");
  assert.equal(sub.attrs["data-child"], "c-1.explore.1");
  one(sub, "child-log");
  assert.match(textOf(sub.children[0]), /Subagent transcript: Find the cart/);
});

test("a re-run after a crash stays one card: the kind body shows the second run's result", () => {
  const t = timelineOf(
    [started(1, "t6", "edit_file"), line(2, "attempt.interrupted", { number: 1, worker: "w:1" }), started(3, "t6", "edit_file", 2), settled(4, "tool.completed", "t6", "edit_file", EDIT_RESULT.replace("occurrence", "occurrence (already applied; not applied again)"))],
    [{ task: "t6", arguments: { path: "shop/cart.py" } }],
  );
  const cards = t.cursors().flatMap((c) => findAll(renderItem(t, c), byTestId("tool-call")));
  assert.equal(cards.length, 1);
  assert.equal(findAll(cards[0], byTestId("diff")).length, 1);
  assert.match(textOf(cards[0]), /already applied; not applied again/);
});

test("a tool of no kind keeps the generic card with its arguments", () => {
  const t = timelineOf([started(1, "t7", "plain"), settled(2, "tool.completed", "t7", "plain", "ok")], [{ task: "t7", arguments: { x: 1 } }]);
  const card = one(renderItem(t, 1), "tool-call");
  assert.equal(card.attrs["data-kind"], "");
  assert.match(textOf(card), /\{"x":1\}ok$/);
});

test("calls merged twice with the same input redraw nothing", () => {
  const t = timelineOf([started(1, "t8", "shell")]);
  const call = { task: "t8", arguments: { command: "ls" } };
  assert.deepEqual(t.setCalls([call]), [1]);
  assert.deepEqual(t.setCalls([call]), []);
  assert.deepEqual(t.callsWithoutInput, []);
});
