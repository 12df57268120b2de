// Lines as the HTTP API sends them (fxdurable/http/lines.py): a turn whose deploy is cut by a
// crash, found outcome_unknown on recovery, checked, and finished.

const S = "ops-1";
const T = "sub-1";
let at = 1_700_000_000;

function line(cursor, type, data, turnId = T) {
  at += 1;
  return { cursor, type, sessionId: S, turnId, at, data };
}

export const crashTurn = [
  line(1, "session.created", { agent: "engineer", forked_from: null, after: null, messages: null, parent_session: null, parent_task: null }, null),
  line(2, "turn_start", { submission: T, request_id: "r1" }),
  line(3, "turn.started", { prompt: "Ship release 1.4 to production." }),
  line(4, "attempt.started", { number: 1, worker: "host:1" }),
  line(5, "model.partial", { round: 1, text: "I'll run " }),
  line(6, "model.partial", { round: 1, text: "the tests." }),
  line(7, "model.completed", { round: 1, text: "I'll run the tests.", tools: ["run_tests"], input_tokens: 100, output_tokens: 20, cost_usd: 0.001, stop_reason: "tool_use", stop_inferred: false, truncated: false }),
  line(8, "tool.started", { task: "t1", tool: "run_tests", round: 1, index: 0, policy: "safe", run: 1, execution_id: "e1", reason: null }),
  line(9, "tool.completed", { task: "t1", tool: "run_tests", round: 1, index: 0, result: "128 passed" }),
  line(10, "model.completed", { round: 2, text: "Deploying.", tools: ["deploy"], input_tokens: 150, output_tokens: 10, cost_usd: 0.002, stop_reason: "tool_use", stop_inferred: false, truncated: false }),
  line(11, "tool.started", { task: "t2", tool: "deploy", round: 2, index: 0, policy: "unsafe", run: 1, execution_id: "e2", reason: null }),
  line(12, "attempt.interrupted", { number: 1, worker: "host:1" }),
  line(13, "attempt.started", { number: 2, worker: "host:2" }),
  line(14, "tool.outcome_unknown", { task: "t2", tool: "deploy", round: 2, index: 0, result: "may or may not have completed" }),
  line(15, "model.partial", { round: 3, text: "Checking" }),
  line(16, "model.completed", { round: 3, text: "Checking production.", tools: ["check_deployment"], input_tokens: 200, output_tokens: 12, cost_usd: null, stop_reason: "tool_use", stop_inferred: false, truncated: false }),
  line(17, "tool.started", { task: "t3", tool: "check_deployment", round: 3, index: 0, policy: "safe", run: 1, execution_id: "e3", reason: null }),
  line(18, "tool.completed", { task: "t3", tool: "check_deployment", round: 3, index: 0, result: "production runs release 1.4" }),
  line(19, "model.completed", { round: 4, text: "Release 1.4 is live.", tools: [], input_tokens: 220, output_tokens: 9, cost_usd: 0.003, stop_reason: "end_turn", stop_inferred: false, truncated: false }),
  line(20, "turn_end", { submission: T, text: "Release 1.4 is live.", error: null, outcome: "completed" }),
];

export function progress(cursor, task, tool, text) {
  return { cursor, type: "progress", sessionId: S, turnId: T, at: at + 0.5, data: { task, tool, text } };
}

export function marker(cursor, type, data = {}) {
  return { cursor, type, sessionId: S, data };
}

export const questionTurn = [
  line(21, "turn_start", { submission: "sub-2", request_id: "r2" }, "sub-2"),
  line(22, "model.completed", { round: 1, text: "Deploying.", tools: ["deploy"], input_tokens: 10, output_tokens: 5, cost_usd: null, stop_reason: "tool_use", stop_inferred: false, truncated: false }, "sub-2"),
  line(23, "input.requested", { question: "Deploy release 1.4 to production?", about: "tool", task: "t9", tool: "deploy", round: 1, index: 0 }, "sub-2"),
  line(24, "input.answered", { answer: "deny", about: "tool", reason: "not today", task: "t9", tool: "deploy" }, "sub-2"),
];

/** An ndjson body of `lines`, cut into chunks that split lines in the middle. */
export function ndjson(lines) {
  return lines.map((l) => JSON.stringify(l) + "\n").join("");
}
