import assert from "node:assert/strict";
import { test } from "node:test";

import { sessionRow } from "../../fxdurable/console/static/views/sessions.js";
import { traceLine, traceTotalsText } from "../../fxdurable/console/static/views/trace.js";
import { byTestId, findAll, textOf } from "../../fxdurable/console/static/vnode.js";

test("a session row names its id, state (in words), agent, outcome, unsettled work and question", () => {
  const row = sessionRow({
    id: "ops-1", agent: "engineer", state: "waiting", lastOutcome: "completed", unsettled: 1,
    question: "Deploy 1.4?", createdAt: 1, updatedAt: 1_700_000_000,
  });
  assert.equal(row.attrs["data-testid"], "session-row");
  assert.equal(row.attrs["data-session-id"], "ops-1");
  const text = textOf(row);
  for (const part of ["ops-1", "State(?) waiting for an answer", "Agentengineer", "Last outcomecompleted", "Unsettled1", "Asks: Deploy 1.4?"]) {
    assert.ok(text.includes(part), `${part} in ${text}`);
  }
  assert.equal(findAll(row, (n) => n.tag === "a")[0].attrs.href, "#/sessions/ops-1");
});

test("a trace line has a fork button only where it is a fork point, keeping the point's type", () => {
  const forks = [];
  const step = traceLine({ at: 1, kind: "tool.completed", text: "tool deploy completed", cursor: 12, forkAfter: 12 }, (a) => forks.push(a));
  const header = traceLine({ at: 1, kind: "session", text: "session ops-1", cursor: null, forkAfter: null }, () => {});
  const turn = traceLine({ at: 1, kind: "submission", text: "submission sub-1: completed", cursor: null, forkAfter: "sub-1" }, (a) => forks.push(a));
  assert.equal(findAll(header, byTestId("fork-button")).length, 0);
  const [button] = findAll(step, byTestId("fork-button"));
  assert.equal(button.attrs["data-after"], "12");
  button.attrs.onclick();
  findAll(turn, byTestId("fork-button"))[0].attrs.onclick();
  assert.deepEqual(forks, [12, "sub-1"]); // a cursor stays a number, a submission id a string
  assert.equal(step.attrs["data-testid"], "trace-line");
});

test("trace totals in words", () => {
  assert.equal(
    traceTotalsText({ inputTokens: 10, outputTokens: 5, costUsd: null, turns: 1, attempts: 2, interruptions: 1 }),
    "Totals: 1 turn · 10 input + 5 output tokens · cost not reported · 2 attempts · 1 interruption",
  );
});
