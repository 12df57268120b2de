import assert from "node:assert/strict";
import { test } from "node:test";

import { AnswerInputError, answerBody, callArguments } from "../../fxdurable/console/static/answers.js";
import { newSessionId, parseRoute } from "../../fxdurable/console/static/router.js";
import { Api, ApiError, basePath } from "../../fxdurable/console/static/api.js";

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

test("a 401 asks for a token once for concurrent requests, keeps it, and repeats them", async () => {
  const store = new Map();
  const storage = { getItem: (k) => store.get(k) ?? null, setItem: (k, v) => store.set(k, v), removeItem: (k) => store.delete(k) };
  const seen = [];
  const fetch = async (url, init) => {
    seen.push(init.headers.Authorization ?? null);
    const ok = init.headers.Authorization === "Bearer right";
    return new Response(JSON.stringify(ok ? { ok: true } : { code: "unauthorized", message: "no" }), { status: ok ? 200 : 401 });
  };
  const asked = [];
  const answers = ["wrong", "right"];
  const api = new Api({ fetch, storage, askToken: async (how) => (asked.push(how.refused), answers.shift()) });
  const [a, b] = await Promise.all([api.json("GET", "/a"), api.json("GET", "/b")]);
  assert.deepEqual([a, b], [{ ok: true }, { ok: true }]);
  assert.deepEqual(asked, [false, true]); // the second time it says the first was refused
  assert.equal(storage.getItem("fxdurable.token"), "right");
  assert.equal(seen.filter((h) => h === "Bearer right").length, 2);
});

test("errors carry the API's code and message", async () => {
  const fetch = async () => new Response(JSON.stringify({ code: "agent_busy", message: "busy" }), { status: 409 });
  const api = new Api({ fetch, storage: null, askToken: null });
  await assert.rejects(api.json("POST", "/chat", { body: {} }), (e) => e instanceof ApiError && e.status === 409 && e.code === "agent_busy" && e.message === "busy");
});
