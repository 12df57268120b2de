// One timeline item as an element description (vnode.js): pure, so node tests read it.
//
// Every state carries its word (and an icon) in the text, so it reads without colour; the
// classes only add colour and weight. `actions` are the question box's handlers (the page
// passes real ones; tests pass none).

import { KINDS, kindBody, readTarget } from "./kinds.js";
import { TOOL_SETTLED } from "./timeline.js";
import { h } from "./vnode.js";

const STATUS_WORD = {
  running: "running",
  completed: "completed",
  failed: "failed",
  cancelled: "cancelled",
  refused: "refused",
  outcome_unknown: "outcome unknown",
};
const STATUS_ICON = {
  running: "…",
  completed: "✓",
  failed: "✗",
  cancelled: "⊘",
  refused: "⊗",
  outcome_unknown: "⚠",
};
const OUTCOME_ICON = { completed: "✓", failed: "✗", aborted: "⊘" };

export function clock(at) {
  if (typeof at !== "number") return "";
  const d = new Date(at * 1000);
  return [d.getHours(), d.getMinutes(), d.getSeconds()].map((n) => String(n).padStart(2, "0")).join(":");
}

/** A field as text; "?" for one the line does not have (an older or newer server's). */
const f = (value) => (value === undefined || value === null ? "?" : value);

export function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

// " (80 cached, 20 written to cache)": the prompt cache's share of an input count.
export function cacheNote(read, written) {
  const said = [];
  if (read) said.push(`${read} cached`);
  if (written) said.push(`${written} written to cache`);
  return said.length ? ` (${said.join(", ")})` : "";
}

export function usageText(t) {
  const cost = t.costUsd === null || t.costUsd === undefined ? "cost not reported" : `$${t.costUsd.toFixed(4)}`;
  const cached = cacheNote(t.cacheReadTokens ?? 0, t.cacheCreationTokens ?? 0);
  return `${plural(t.calls, "model call")} · ${t.inputTokens} input${cached} + ${t.outputTokens} output tokens · ${cost}`;
}

export function turnTotalsText(t) {
  return `Turn totals: ${usageText(t)} · ${plural(t.attempts, "attempt")} · ${plural(t.interruptions, "interruption")}`;
}

export function sessionTotalsText(s) {
  return `Session totals: ${plural(s.turns, "turn")} · ${usageText(s)} · ${plural(s.interruptions, "interruption")}`;
}

function short(value, width = 400) {
  const flat = String(value ?? "");
  return flat.length <= width ? flat : flat.slice(0, width - 1) + "…";
}

function wrap(item, attrs, ...children) {
  const line = item.line;
  return h(
    "li",
    {
      "data-testid": "event",
      "data-cursor": item.cursor,
      "data-kind": item.type,
      class: `ev ${attrs.class || ""}`.trim(),
      hidden: item.hidden || attrs.hidden || null,
    },
    h("span", { class: "meta" }, `#${item.cursor} `, h("time", {}, clock(line.at))),
    " ",
    ...children,
  );
}

function label(text) {
  return [h("strong", { class: "label" }, text), " "];
}

function p(cls, ...children) {
  return h("span", { class: cls }, ...children);
}

// -- tool calls ---------------------------------------------------------------------------

/** A tool call's card: its head (name, status word, replay policy) and its body, by the
 * tool's kind when it declares one (kinds.js), else its arguments and result. */
export function toolCall(tool) {
  const word = STATUS_WORD[tool.status] || tool.status;
  const unknown = tool.status === "outcome_unknown";
  const rerun = tool.run > 1 ? ` · run ${tool.run}${tool.reason ? ` (${tool.reason})` : ""}` : "";
  const kind = KINDS.has(tool.kind) ? tool.kind : null;
  const body = kind ? kindBody({ ...tool, kind, result: unknown ? null : tool.result }) : null;
  const target = kind === "diff" || kind === "read" ? readTarget(tool.arguments) : "";
  return h(
    "div",
    {
      "data-testid": "tool-call",
      "data-tool": tool.tool,
      "data-status": tool.status,
      "data-policy": tool.policy || "",
      "data-task": tool.task,
      "data-kind": kind || "",
      class: `tool status-${tool.status}${kind ? ` kind-${kind}` : ""}`,
      role: unknown ? "alert" : null,
    },
    h(
      "div",
      { class: "tool-head" },
      h("strong", { class: "tool-name" }, `Tool ${f(tool.tool)}`),
      target && h("code", { class: "tool-target" }, target),
      " ",
      h("span", { class: "status" }, `${STATUS_ICON[tool.status] || "•"} ${unknown ? word.toUpperCase() : word}`),
      " ",
      h("span", { class: "policy" }, `replay policy: ${tool.policy || "unknown"}${rerun}`),
    ),
    unknown &&
      h(
        "p",
        { class: "unknown-note" },
        "Outcome unknown: this call may or may not have happened. It will NOT be replayed " +
          "automatically; the model is told to inspect first.",
      ),
    !kind && tool.arguments && Object.keys(tool.arguments).length > 0 && h("code", { class: "tool-args" }, short(JSON.stringify(tool.arguments), 300)),
    tool.status === "running" &&
      kind !== "terminal" &&
      h("pre", { "data-testid": "tool-progress", class: "progress", "aria-label": "tool progress" }, tool.progress || "working…"),
    body,
    tool.steps > 0 && h("p", { class: "steps" }, `${plural(tool.steps, "durable step")} recorded`),
    !body && tool.result !== null && !unknown && h("pre", { class: "result" }, short(tool.result, 2000)),
  );
}

function toolStarted(timeline, item) {
  const data = item.line.data;
  const tool = timeline.call(data.task);
  if (tool && tool.anchor === item.cursor) return wrap(item, { class: "ev-tool" }, toolCall(tool));
  return wrap(
    item,
    { class: "ev-tool ev-dim" },
    `Tool ${f(data.tool)} run ${data.run ?? 1} started (${f(data.policy)}); it was run again later, see below`,
  );
}

// A settlement shows in its call's card (each call once); its own line stays in the log,
// hidden, so the log keeps every cursor. A call settled without a start (a refusal decided
// before it ran) anchors its card here.
function toolSettled(timeline, item) {
  const data = item.line.data;
  const tool = timeline.call(data.task);
  if (tool && tool.anchor === item.cursor) return wrap(item, { class: "ev-tool" }, toolCall(tool));
  const status = item.type.slice("tool.".length);
  return wrap(item, { class: `ev-tool-result status-${status}`, hidden: Boolean(tool) }, `Tool ${f(data.tool)}: ${STATUS_WORD[status] || status}`);
}

// -- model ---------------------------------------------------------------------------------

function partial(timeline, item) {
  const line = item.line;
  const open = timeline.partials.get(`${line.turnId}|${line.data.round}`);
  if (!open || open.cursor !== item.cursor) return wrap(item, { hidden: true }, "(streamed text)");
  if (open.state === "recorded") return wrap(item, { hidden: true }, "(streamed text, recorded below)");
  if (open.state === "cut") {
    return wrap(item, { class: "ev-warn" }, ...label("Model reply cut off:"), p("text", open.text), " (aborted partial)");
  }
  return wrap(
    item,
    { class: "ev-model" },
    ...label("Model (streaming…):"),
    h("span", { "data-testid": "partial-text", class: "text", "aria-live": "off" }, open.text),
  );
}

function modelCompleted(item) {
  const d = item.line.data;
  const tools = Array.isArray(d.tools) && d.tools.length ? ` → calls ${d.tools.join(", ")}` : "";
  const cost = typeof d.cost_usd === "number" ? `, $${d.cost_usd.toFixed(4)}` : "";
  const stop = d.truncated ? ` · TRUNCATED (${f(d.stop_reason)})` : "";
  const cached = cacheNote(Number(d.cache_read_tokens) || 0, Number(d.cache_creation_tokens) || 0);
  return wrap(
    item,
    { class: "ev-model" },
    ...label("Model:"),
    p("text", d.text || "(no text)"),
    h("span", { class: "calls" }, tools),
    " ",
    h("span", { class: "tokens" }, `[${d.input_tokens ?? 0} → ${d.output_tokens ?? 0} tokens${cached}${cost}]${stop}`),
    thinking(d),
  );
}

// The model's reasoning, collapsed: never answer text. Redacted or encrypted pieces have
// nothing to read and are only counted.
function thinking(d) {
  const text = typeof d.thinking === "string" ? d.thinking : "";
  const hidden = Number(d.thinking_hidden) || 0;
  if (!text && !hidden) return "";
  const what = [text ? `${text.length} characters` : "", hidden ? `${hidden} hidden` : ""].filter(Boolean).join(", ");
  return h(
    "details",
    { class: "thinking", "data-testid": "thinking" },
    h("summary", {}, `Thinking (${what})`),
    text ? h("pre", { class: "thinking-text" }, text) : "",
  );
}

// -- questions -----------------------------------------------------------------------------

function question(timeline, item, actions) {
  const q = timeline.questions.get(item.cursor);
  const d = item.line.data;
  const spent = d.about === "budget" ? " (its spending budget is spent)" : " (its attempts ran out)";
  const about = d.tool ? ` (about tool ${f(d.tool)})` : spent;
  if (!q || q.answer || q.closed) {
    const outcome = q && q.answer ? `answered ${q.answer.answer}${q.answer.reason ? `: ${q.answer.reason}` : ""}` : "not answered (the turn ended)";
    return wrap(item, { class: "ev-question" }, ...label("Question:"), p("text", d.question), about, ` — ${outcome}`);
  }
  const act = actions || {};
  const id = `q-${item.cursor}`;
  const plan = d.tool === "exit_plan_mode";
  return wrap(
    item,
    { class: "ev-question" },
    h(
      "div",
      { "data-testid": "question", class: `question${plan ? " plan-question" : ""}`, role: "group", "aria-labelledby": `${id}-text`, "data-tool": d.tool ?? "" },
      h("p", { id: `${id}-text` }, h("strong", {}, plan ? "(?) The agent asks you to approve its plan" : "(?) The agent asks you"), plan ? "" : about, ": ", p("text", d.question)),
      h(
        "div",
        { class: "buttons" },
        h("button", { type: "button", "data-testid": "answer-allow", class: "primary", onclick: act.allow }, plan ? "Approve plan" : "Yes"),
        d.tool && !plan && act.allowAlways &&
          h("button", { type: "button", "data-testid": "answer-allow-always", onclick: act.allowAlways }, `Yes, and don't ask again for ${d.tool} in this session`),
        h("button", { type: "button", "data-testid": "answer-deny", onclick: act.deny }, plan ? "Keep planning" : "No"),
        d.tool && !plan && h("button", { type: "button", "data-testid": "answer-edit", onclick: act.edit, "aria-expanded": "false", "aria-controls": `${id}-edit` }, "Edit input…"),
      ),
      h("label", { for: `${id}-reason` }, plan ? "What to change in the plan (the model reads it)" : "Reason for a No (optional; the model reads it)"),
      h("input", { id: `${id}-reason`, type: "text", "data-testid": "answer-reason", class: "answer-reason" }),
      d.tool && !plan &&
        h(
          "div",
          { id: `${id}-edit`, class: "edit", hidden: true, "data-testid": "answer-edit-form" },
          h("label", { for: `${id}-input` }, `The call's input, as JSON (edit, then submit to run ${f(d.tool)} with it)`),
          h("textarea", { id: `${id}-input`, "data-testid": "answer-input", rows: 6, spellcheck: "false" }),
          h("button", { type: "button", "data-testid": "answer-submit", onclick: act.submitEdit }, "Run with this input"),
        ),
      h("p", { class: "answer-error", role: "status" }),
    ),
  );
}

// -- turns ----------------------------------------------------------------------------------

function turnEnd(timeline, item) {
  const d = item.line.data;
  const turn = timeline.turns.get(item.line.turnId ?? d.submission);
  const outcome = d.outcome || "settled";
  const detail = d.error ? `${d.error.code}: ${d.error.message}` : d.text || "";
  return wrap(
    item,
    { class: `ev-turn-end outcome-${outcome}` },
    ...label(`${OUTCOME_ICON[outcome] || "•"} Turn ${outcome}${detail ? ":" : "."}`),
    p("text", detail),
    turn && h("div", { "data-testid": "turn-totals", class: "totals" }, turnTotalsText(turn)),
  );
}

function fields(data) {
  return short(JSON.stringify(data ?? {}), 200);
}

function keys(value) {
  return value && typeof value === "object" ? Object.keys(value).sort().join(", ") : "";
}

/** The element description of the item at `cursor`. */
export function renderItem(timeline, cursor, actions) {
  const item = timeline.items.get(cursor);
  const line = item.line;
  const d = line.data || {};
  switch (item.type) {
    case "session.created":
      if (d.forked_from != null) {
        return wrap(item, { class: "ev-dim" }, `Session forked from ${f(d.forked_from)} after line ${f(d.after)} (${f(d.messages)} messages), agent ${f(d.agent)}`);
      }
      return wrap(item, { class: "ev-dim" }, `Session created for agent ${f(d.agent)}`);
    case "turn_start":
      return wrap(item, { class: "ev-dim" }, `Turn admitted (submission ${f(d.submission)})`);
    case "turn.started":
      return wrap(item, { class: "ev-you" }, ...label("You:"), p("text", d.prompt));
    case "attempt.started":
      return wrap(item, { class: "ev-dim" }, h("span", { "data-testid": "attempt" }, `Attempt ${f(d.number)} started on ${f(d.worker)}`));
    case "attempt.yielded": {
      const text =
        d.reason === "needs input"
          ? `Attempt ${f(d.number)} ended: the turn waits for an answer`
          : `Attempt ${f(d.number)} paused (${f(d.reason)}); a continuation follows`;
      return wrap(item, { class: "ev-dim" }, h("span", { "data-testid": "attempt" }, text));
    }
    case "attempt.interrupted":
      return wrap(
        item,
        { class: "ev-warn" },
        h("span", { "data-testid": "interruption" }, `⚠ INTERRUPTED: attempt ${f(d.number)} died with its process (${f(d.worker)}); resuming from the last committed step`),
      );
    case "submission.interrupted": {
      const unknown = (d.unknown_calls || []).join(", ");
      return wrap(
        item,
        { class: "ev-warn" },
        h("span", { "data-testid": "interruption" }, `⚠ INTERRUPTED ${f(d.interruptions)} times (${f(d.reason)}); ${unknown ? `outcome unknown for: ${unknown}` : "no call left unknown"}`),
      );
    }
    case "model.partial":
      return partial(timeline, item);
    case "model.completed":
      return modelCompleted(item);
    case "model.error":
      return wrap(item, { class: "ev-warn" }, `⚠ Model error ${f(d.errors)} in round ${f(d.round)}, retrying: ${short(d.message, 200)}`);
    case "model.fallback": {
      const dropped = Number(d.dropped_parts) || 0;
      const note = dropped ? `; ${dropped} reasoning part(s) only ${f(d.from_model)} can read are not sent` : "";
      return wrap(item, { class: "ev-warn" }, `⚠ Model fallback in round ${f(d.round)}: ${f(d.from_model)} → ${f(d.to_model)} (${short(d.reason, 200)})${note}`);
    }
    case "output.rejected":
      // A typed final answer that did not validate: the model is told why and asked again.
      return wrap(item, { class: "ev-warn" }, `⚠ Answer rejected (${f(d.rejections)}) in round ${f(d.round)}: ${short(String(d.message || "").split("\n")[0], 200)}`);
    case "model.interrupted":
      return wrap(item, { class: "ev-warn" }, ...label("Model reply cut off"), `in round ${f(d.round)} (its process died), kept as interrupted: `, p("text", d.text));
    case "context.compacted":
      return wrap(item, { class: "ev-dim" }, `Context compacted: messages up to #${f(d.upto)} summarised (${String(d.summary || "").length} characters)`);
    case "tool.started":
      return toolStarted(timeline, item);
    case "tool.step":
      return wrap(item, { class: "ev-dim" }, `Tool ${f(d.tool)} step ${f(d.step)} recorded (replayed, not re-run, if the call runs again)`);
    case "tool.retrying":
      return wrap(item, { class: "ev-warn" }, `⚠ Tool ${f(d.tool)} failed (${short(d.error, 200)}); retrying in ${Number(d.delay_s).toFixed(1)} s (${f(d.failed_runs)} failed so far)`);
    case "webhook.delivered":
      return wrap(item, { class: "ev-dim" }, `Webhook for ${f(d.submission)} delivered (HTTP ${f(d.status)}, attempt ${f(d.attempts)})`);
    case "webhook.abandoned":
      return wrap(item, { class: "ev-warn" }, `⚠ Webhook for ${f(d.submission)} abandoned after ${f(d.attempts)} attempt(s): ${short(d.error, 200)}`);
    case "state.changed": {
      const parts = [keys(d.set) && `set ${keys(d.set)}`, (d.deleted || []).length && `deleted ${d.deleted.join(", ")}`].filter(Boolean);
      // No task: a fork's copy of its source's state, or a person's write between calls (a
      // "don't ask again" grant, its revocation).
      const copied = timeline.forkedAt != null && item.cursor === timeline.forkedAt + 1;
      const who = d.task != null ? `Tool ${f(d.tool)} state` : copied ? "State copied from the fork's source" : "State set by you";
      // A call's own commit shows in its card (a todo list's checklist): not a second line.
      const own = d.task != null && timeline.kinds.get(d.tool) && timeline.tools.has(d.task);
      return wrap(item, { class: "ev-dim", hidden: own || null }, `${who}: ${parts.join("; ") || "unchanged"}`);
    }
    case "steer.recorded":
      return wrap(item, { class: "ev-you" }, ...label("You (steering):"), p("text", d.text));
    case "steer.delivered":
      return wrap(item, { class: "ev-dim" }, `Steering shown to the model in round ${f(d.round)}`);
    case "steer.dropped":
      return wrap(item, { class: "ev-warn" }, `Steering dropped with its turn (${f(d.reason)})`);
    case "steer.requeued":
      return wrap(item, { class: "ev-dim" }, `Steering arrived after its turn settled: queued as submission ${f(d.submission)}`);
    case "abort.requested":
      return wrap(item, { class: "ev-warn" }, `⊘ Abort requested for ${(d.submissions || []).join(", ") || "nothing running"}`);
    case "input.requested":
      return question(timeline, item, actions);
    case "input.answered":
      return wrap(item, { class: "ev-dim" }, `Answered ${f(d.answer)}${d.reason ? `: ${f(d.reason)}` : ""}`);
    case "turn_end":
      return turnEnd(timeline, item);
    default:
      if (TOOL_SETTLED.has(item.type)) return toolSettled(timeline, item);
      return wrap(item, { class: "ev-dim ev-unknown" }, `${item.type} ${fields(d)}`); // a newer server's
  }
}
