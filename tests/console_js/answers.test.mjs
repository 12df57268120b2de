import assert from "node:assert/strict";
import { test } from "node:test";

import { AnswerInputError, answerBody, callArguments } from "../../fxdurable/console/static/answers.js";
import { newSessionId, parseRoute } from "../../fxdurable/console/static/router.js";
import { basePath } from "../../fxdurable/console/static/api.js";

const history = [
  { role: "user", text: "Ship it", toolCalls: [] },
  { role: "assistant", text: "Testing", toolCalls: [{ name: "run_tests", arguments: "{}", id: "c1" }] },
  { role: "tool", text: "ok", toolCalls: [] },
  { role: "assistant", text: "Deploying", toolCalls: [{ name: "run_tests", arguments: "{}" }, { name: "deploy", arguments: '{"version":"1.4"}' }] },
];

test("an edit is prefilled with the waiting call's input, pretty", () => {
  assert.equal(callArguments(history, { tool: "deploy", index: 1 }), '{\n  "version": "1.4"\n}');
  assert.equal(callArguments(history, { tool: "deploy", index: 0 }), '{\n  "version": "1.4"\n}'); // by name
  assert.equal(callArguments(history, { tool: "nothing", index: 0 }), "{}");
});

test("answer bodies: a reason only with a deny; a rewrite needs a JSON object", () => {
  assert.deepEqual(answerBody("allow"), { answer: "allow" });
  assert.deepEqual(answerBody("deny", { reason: "  " }), { answer: "deny" });
  assert.deepEqual(answerBody("deny", { reason: "not now" }), { answer: "deny", reason: "not now" });
  assert.deepEqual(answerBody("rewrite", { inputText: '{"version": "1.3"}' }), { answer: "rewrite", input: { version: "1.3" } });
  assert.throws(() => answerBody("rewrite", { inputText: "{oops" }), AnswerInputError);
  assert.throws(() => answerBody("rewrite", { inputText: "[1]" }), /must be a JSON object/);
});

test("hash routes", () => {
  assert.equal(parseRoute("").view, "sessions");
  assert.deepEqual(parseRoute("#/?state=running").params.getAll("state"), ["running"]);
  assert.deepEqual({ ...parseRoute("#/sessions/ops%3A1") , params: null }, { view: "session", id: "ops:1", params: null });
  assert.equal(parseRoute("#/sessions/ops-1/trace").view, "trace");
  assert.match(newSessionId(() => 0.5), /^s-\d{8}-\d{6}-[0-9a-z]{4}$/);
});

test("the API lives where the console's /console is mounted", () => {
  assert.equal(basePath("/console/"), "");
  assert.equal(basePath("/prod/console/"), "/prod");
});
