import assert from "node:assert/strict";
import { test } from "node:test";

import { Timeline } from "../../fxdurable/console/static/timeline.js";
import { crashTurn, marker, progress, questionTurn } from "./lines.mjs";

function ingestAll(timeline, lines) {
  for (const line of lines) timeline.ingest(line);
  return timeline;
}

test("every journal line is one item; a line seen again is dropped", () => {
  const t = new Timeline();
  assert.deepEqual(t.ingest(crashTurn[0]), [1]);
  assert.deepEqual(t.ingest(crashTurn[0]), []);
  ingestAll(t, crashTurn);
  ingestAll(t, crashTurn.slice(5)); // a reconnect from an older cursor
  assert.deepEqual(t.cursors(), crashTurn.map((l) => l.cursor));
  assert.equal(t.lastCursor, 20);
});

test("markers are not items: keepalive, stream_end and progress", () => {
  const t = ingestAll(new Timeline(), crashTurn.slice(0, 11));
  t.ingest(marker(11, "keepalive"));
  t.ingest(marker(11, "stream_end", { reason: "idle" }));
  t.ingest(progress(11, "t2", "deploy", "uploading 40%"));
  assert.equal(t.items.size, 11);
});

test("progress updates the running call in place, and stops once it settled", () => {
  const t = ingestAll(new Timeline(), crashTurn.slice(0, 11));
  assert.deepEqual(t.ingest(progress(11, "t2", "deploy", "uploading 40%")), [11]);
  assert.deepEqual(t.ingest(progress(11, "t2", "deploy", "uploading 40%")), []); // unchanged
  assert.equal(t.tools.get("t2").progress, "uploading 40%");
  ingestAll(t, crashTurn.slice(11, 14));
  assert.deepEqual(t.ingest(progress(14, "t2", "deploy", "late")), []);
});

test("tool calls: one per task, with policy and status; outcome_unknown after the crash", () => {
  const t = ingestAll(new Timeline(), crashTurn.slice(0, 12));
  assert.equal(t.tools.get("t2").status, "running");
  assert.equal(t.tools.get("t2").policy, "unsafe");
  assert.deepEqual(t.ingest(crashTurn[13]), [14, 11]); // the settle line, and the call redrawn
  assert.equal(t.tools.get("t2").status, "outcome_unknown");
  ingestAll(t, crashTurn);
  assert.deepEqual(
    [...t.tools.values()].map((c) => [c.tool, c.status]),
    [["run_tests", "completed"], ["deploy", "outcome_unknown"], ["check_deployment", "completed"]],
  );
});

test("a re-run moves the call to its latest start", () => {
  const t = ingestAll(new Timeline(), crashTurn.slice(0, 8));
  const rerun = { ...crashTurn[7], cursor: 30, data: { ...crashTurn[7].data, run: 2, reason: "re-executed after interruption" } };
  assert.deepEqual(t.ingest(rerun), [30, 8]);
  assert.equal(t.tools.get("t1").anchor, 30);
  assert.equal(t.tools.get("t1").run, 2);
});

test("a refusal without a start we saw still makes a call, with the tool's known policy", () => {
  const t = ingestAll(new Timeline(), crashTurn);
  const refused = { ...crashTurn[13], cursor: 40, type: "tool.refused", data: { ...crashTurn[13].data, task: "t5", result: "Refused" } };
  t.ingest(refused);
  const call = t.tools.get("t5");
  assert.equal(call.status, "refused");
  assert.equal(call.policy, "unsafe");
  assert.equal(call.anchor, 40);
});

test("partial text accumulates per round until the reply is recorded; a crash cuts it", () => {
  const t = ingestAll(new Timeline(), crashTurn.slice(0, 6));
  const open = t.partials.get("sub-1|1");
  assert.equal(open.text, "I'll run the tests.");
  assert.equal(open.state, "streaming");
  assert.equal(t.items.get(6).hidden, true); // shown in the first piece's item
  t.ingest(crashTurn[6]);
  assert.equal(open.state, "recorded");
  const cut = ingestAll(new Timeline(), [...crashTurn.slice(0, 5), crashTurn[11]]);
  assert.equal(cut.partials.get("sub-1|1").state, "cut");
});

test("turn and session totals: tokens, cost, attempts, interruptions", () => {
  const t = ingestAll(new Timeline(), crashTurn);
  const turn = t.turns.get("sub-1");
  assert.deepEqual(
    { calls: turn.calls, in: turn.inputTokens, out: turn.outputTokens, attempts: turn.attempts, interruptions: turn.interruptions, outcome: turn.outcome },
    { calls: 4, in: 670, out: 51, attempts: 2, interruptions: 1, outcome: "completed" },
  );
  assert.ok(Math.abs(turn.costUsd - 0.006) < 1e-9);
  ingestAll(t, questionTurn);
  const s = t.sessionTotals();
  assert.equal(s.turns, 2);
  assert.equal(s.inputTokens, 680);
});

test("busy while a submission is unsettled; a question waits until answered", () => {
  const t = new Timeline();
  ingestAll(t, crashTurn.slice(0, 5));
  assert.equal(t.busy, true);
  ingestAll(t, crashTurn);
  assert.equal(t.busy, false);
  ingestAll(t, questionTurn.slice(0, 3));
  assert.equal(t.busy, true);
  assert.equal(t.pendingQuestion.data.tool, "deploy");
  assert.deepEqual(t.ingest(questionTurn[3]), [24, 23]);
  assert.equal(t.pendingQuestion, null);
});
