import assert from "node:assert/strict";
import { test } from "node:test";

import { renderItem } from "../../fxdurable/console/static/render.js";
import { Timeline } from "../../fxdurable/console/static/timeline.js";
import { byTestId, findAll, textOf } from "../../fxdurable/console/static/vnode.js";
import { crashTurn, progress, questionTurn } from "./lines.mjs";

function timelineOf(lines) {
  const t = new Timeline();
  for (const line of lines) t.ingest(line);
  return t;
}

const one = (node, id) => {
  const found = findAll(node, byTestId(id));
  assert.equal(found.length, 1, `one ${id}`);
  return found[0];
};

test("every item is an `event` with its cursor and kind", () => {
  const t = timelineOf([...crashTurn, ...questionTurn]);
  for (const cursor of t.cursors()) {
    const node = renderItem(t, cursor);
    assert.equal(node.attrs["data-testid"], "event");
    assert.equal(node.attrs["data-cursor"], cursor);
    assert.equal(node.attrs["data-kind"], t.items.get(cursor).type);
  }
});

test("a running tool call shows its status word, policy and progress", () => {
  const t = timelineOf(crashTurn.slice(0, 11));
  t.ingest(progress(11, "t2", "deploy", "uploading 40%"));
  const call = one(renderItem(t, 11), "tool-call");
  assert.equal(call.attrs["data-tool"], "deploy");
  assert.equal(call.attrs["data-status"], "running");
  assert.equal(call.attrs["data-policy"], "unsafe");
  assert.match(textOf(call), /running/);
  assert.match(textOf(call), /replay policy: unsafe/);
  assert.equal(textOf(one(call, "tool-progress")), "uploading 40%");
});

test("outcome_unknown is unmistakable: words, an alert, no progress", () => {
  const t = timelineOf(crashTurn);
  const call = one(renderItem(t, 11), "tool-call");
  assert.equal(call.attrs["data-status"], "outcome_unknown");
  assert.equal(call.attrs.role, "alert");
  assert.match(textOf(call), /OUTCOME UNKNOWN/);
  assert.match(textOf(call), /Outcome unknown: this call may or may not have happened/);
  assert.equal(findAll(call, byTestId("tool-progress")).length, 0);
  // The settlement's own line is hidden: the call shows once, its card says it.
  assert.equal(renderItem(t, 14).attrs.hidden, true);
});

test("settled calls carry their word: completed", () => {
  const t = timelineOf(crashTurn);
  const call = one(renderItem(t, 8), "tool-call");
  assert.equal(call.attrs["data-status"], "completed");
  assert.match(textOf(call), /✓ completed/);
  assert.match(textOf(call), /128 passed/);
});

test("partial text while streaming, hidden once recorded, kept and labelled when cut", () => {
  const streaming = timelineOf(crashTurn.slice(0, 6));
  assert.equal(textOf(one(renderItem(streaming, 5), "partial-text")), "I'll run the tests.");
  assert.equal(renderItem(streaming, 6).attrs.hidden, true);
  const recorded = timelineOf(crashTurn.slice(0, 7));
  assert.equal(renderItem(recorded, 5).attrs.hidden, true);
  const cut = timelineOf([...crashTurn.slice(0, 5), crashTurn[11]]);
  assert.match(textOf(renderItem(cut, 5)), /cut off: I'll run +\(aborted partial\)/);
});

test("attempts and interruptions have their own lines", () => {
  const t = timelineOf(crashTurn);
  assert.match(textOf(one(renderItem(t, 4), "attempt")), /Attempt 1 started on host:1/);
  assert.match(textOf(one(renderItem(t, 12), "interruption")), /INTERRUPTED: attempt 1 died/);
});

test("model replies with their calls and tokens; the turn's end with its totals", () => {
  const t = timelineOf(crashTurn);
  assert.match(textOf(renderItem(t, 10)), /Model: Deploying\. → calls deploy \[150 → 10 tokens, \$0\.0020\]/);
  const end = renderItem(t, 20);
  assert.match(textOf(end), /✓ Turn completed:/);
  assert.equal(
    textOf(one(end, "turn-totals")),
    "Turn totals: 4 model calls · 670 input + 51 output tokens · $0.0060 · 2 attempts · 1 interruption",
  );
});

test("cache hits and writes show on the model call and in the totals", () => {
  const cached = crashTurn.map((l) =>
    l.type === "model.completed" && l.data.round === 2
      ? { ...l, data: { ...l.data, cache_read_tokens: 120, cache_creation_tokens: 30 } }
      : l,
  );
  const t = timelineOf(cached);
  assert.match(textOf(renderItem(t, 10)), /\[150 → 10 tokens \(120 cached, 30 written to cache\), \$0\.0020\]/);
  assert.match(textOf(one(renderItem(t, 20), "turn-totals")), /670 input \(120 cached, 30 written to cache\) \+ 51 output/);
  assert.match(textOf(renderItem(timelineOf(crashTurn), 10)), /\[150 → 10 tokens, \$0\.0020\]/, "nothing said without a hit");
});

test("a model's thinking is collapsed apart from its answer, hidden pieces counted", () => {
  const thought = crashTurn.map((l) =>
    l.type === "model.completed" && l.data.round === 2
      ? { ...l, data: { ...l.data, thinking: "Weigh the deploy first.", thinking_hidden: 1 } }
      : l,
  );
  const item = renderItem(timelineOf(thought), 10);
  const box = one(item, "thinking");
  assert.equal(box.tag, "details", "collapsed until opened");
  assert.match(textOf(box), /^Thinking \(23 characters, 1 hidden\)Weigh the deploy first\.$/);
  const answer = findAll(item, (n) => n.attrs && n.attrs.class === "text");
  assert.ok(answer.every((n) => !/Weigh/.test(textOf(n))), "never in the answer text");
  assert.equal(findAll(renderItem(timelineOf(crashTurn), 10), byTestId("thinking")).length, 0);
});

test("a pending question has allow, deny and edit; once answered it says how", () => {
  const t = timelineOf([...crashTurn, ...questionTurn.slice(0, 3)]);
  const box = one(renderItem(t, 23), "question");
  assert.match(textOf(box), /Deploy release 1\.4 to production\?/);
  for (const id of ["answer-allow", "answer-deny", "answer-edit", "answer-input", "answer-submit"]) one(box, id);
  t.ingest(questionTurn[3]);
  const answered = renderItem(t, 23);
  assert.equal(findAll(answered, byTestId("question")).length, 0);
  assert.match(textOf(answered), /answered deny: not today/);
});

test("a line type this console does not know still shows, by name", () => {
  const t = timelineOf([{ cursor: 1, type: "future.thing", sessionId: "s", turnId: null, at: 1, data: { x: 1 } }]);
  assert.match(textOf(renderItem(t, 1)), /future\.thing \{"x":1\}/);
});

test("a call refused before it started is still a tool call, with its word", () => {
  const refused = { cursor: 21, type: "tool.refused", sessionId: "ops-1", turnId: "sub-1", at: 2, data: { task: "t7", tool: "deploy", round: 5, index: 0, result: "Refused: a blind repeat" } };
  const t = timelineOf([...crashTurn, refused]);
  const call = one(renderItem(t, 21), "tool-call");
  assert.equal(call.attrs["data-status"], "refused");
  assert.equal(call.attrs["data-policy"], "unsafe");
  assert.match(textOf(call), /⊗ refused/);
});

test("a fallback switch says which models, why, and what reasoning is not sent", () => {
  const at = 1_700_000_000;
  const line = (cursor, type, data) => ({ cursor, type, sessionId: "s", turnId: "sub-1", at, data });
  const t = timelineOf([
    line(1, "model.partial", { round: 0, text: "half an ans" }),
    line(2, "model.fallback", { round: 0, from_model: "claude", to_model: "gpt", reason: "claude failed (ModelOverloadedError): 529", dropped_parts: 2 }),
  ]);
  const text = textOf(renderItem(t, 2));
  assert.match(text, /Model fallback in round 0: claude → gpt/);
  assert.match(text, /ModelOverloadedError/);
  assert.match(text, /2 reasoning part\(s\) only claude can read are not sent/);
  // The failed stream's text is no answer: kept, labelled as cut off.
  assert.match(textOf(renderItem(t, 1)), /cut off: half an ans/);
});

test("a retried tool run says what failed and how long until the next run", () => {
  const line = { cursor: 1, type: "tool.retrying", sessionId: "s", turnId: "sub-1", at: 1_700_000_000, data: { task: "t1", tool: "fetch", round: 0, index: 0, failed_runs: 2, error: "ConnectionError: reset", delay_s: 1.25 } };
  const item = renderItem(timelineOf([line]), 1);
  assert.equal(item.attrs.class.includes("ev-warn"), true);
  assert.match(textOf(item), /Tool fetch failed \(ConnectionError: reset\); retrying in 1\.3 s \(2 failed so far\)/);
});

test("a state change with no task is a fork's copy right after the fork, else a person's write", () => {
  const created = { type: "session.created", cursor: 1, turnId: null, data: { agent: "coder", forked_from: "src", after: 9, messages: 2 } };
  const change = (cursor, set) => ({ type: "state.changed", cursor, turnId: null, data: { set, deleted: [], task: null, tool: null, step: null } });
  const t = timelineOf([created, change(2, { todos: [] }), change(3, { allowed_tools: ["shell"] })]);
  assert.match(textOf(renderItem(t, 2)), / State copied from the fork's source: set todos/);
  assert.match(textOf(renderItem(t, 3)), / State set by you: set allowed_tools/);
  const plain = timelineOf([{ ...created, data: { agent: "coder" } }, change(2, { allowed_tools: [] })]);
  assert.match(textOf(renderItem(plain, 2)), / State set by you/);
});
