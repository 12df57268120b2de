// A tool call's body by the kind its tool declares (GET /agents): a unified diff for an
// edit, a terminal for a shell command, a collapsed line for a read, a checklist for a todo
// list, the plan for a plan, a nested transcript for a subagent. Pure (vnode.js), so the node
// tests read it. A tool of no kind (or one this page does not know) keeps the generic body.
//
// Every body reads without colour: a diff's lines keep their "+"/"-" signs, an exit status is
// a word and a number, a todo's state is a mark in the text.

import { h } from "./vnode.js";

export const KINDS = new Set(["read", "diff", "terminal", "todo", "plan", "subagent"]);

/** The kind a tool declares, or null (none, or a kind this page does not know). */
export function kindOf(kinds, tool) {
  const kind = kinds?.get?.(tool) ?? null;
  return KINDS.has(kind) ? kind : null;
}

/** {tool name -> kind} of every agent GET /agents lists (a tool named twice keeps its first). */
export function kindsFromAgents(body) {
  const kinds = new Map();
  for (const agent of body?.agents ?? []) {
    for (const tool of agent.tools ?? []) if (!kinds.has(tool.name)) kinds.set(tool.name, tool.kind ?? null);
  }
  return kinds;
}

// -- diffs -----------------------------------------------------------------------------------

/** An edit's recorded result: its summary line(s) and the unified diff after them.
 * {summary, hunks: [{header, lines: [{sign, text, oldNo, newNo}]}], oldPath, newPath}. */
export function parseDiff(result) {
  const lines = String(result ?? "").split("\n");
  const start = lines.findIndex((l, i) => l.startsWith("--- ") && (lines[i + 1] ?? "").startsWith("+++ "));
  if (start < 0) return { summary: String(result ?? ""), hunks: [], oldPath: null, newPath: null };
  const diff = { summary: lines.slice(0, start).join("\n"), hunks: [], oldPath: lines[start].slice(4), newPath: lines[start + 1].slice(4) };
  let hunk = null;
  let oldNo = 0;
  let newNo = 0;
  for (const line of lines.slice(start + 2)) {
    const header = line.match(/^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@/);
    if (header) {
      hunk = { header: line, lines: [] };
      diff.hunks.push(hunk);
      oldNo = Number(header[1]);
      newNo = Number(header[2]);
      continue;
    }
    if (!hunk || line === "") continue; // the trailing newline, or text before any hunk
    const sign = line[0];
    const text = line.slice(1);
    if (sign === "+") hunk.lines.push({ sign, text, oldNo: null, newNo: newNo++ });
    else if (sign === "-") hunk.lines.push({ sign, text, oldNo: oldNo++, newNo: null });
    else if (sign === "\\") hunk.lines.push({ sign, text, oldNo: null, newNo: null }); // "\ No newline"
    else hunk.lines.push({ sign: " ", text, oldNo: oldNo++, newNo: newNo++ });
  }
  return diff;
}

const SIGN_CLASS = { "+": "add", "-": "del", " ": "ctx", "\\": "note" };

function diffBody(call) {
  const path = call.arguments?.path ?? "";
  if (call.result === null) {
    return h("p", { class: "kind-note" }, `${call.status === "running" ? "Editing" : "Edit of"} `, h("code", {}, path || "a file"), call.status === "running" ? "…" : "");
  }
  const diff = parseDiff(call.result);
  const added = diff.hunks.reduce((n, k) => n + k.lines.filter((l) => l.sign === "+").length, 0);
  const removed = diff.hunks.reduce((n, k) => n + k.lines.filter((l) => l.sign === "-").length, 0);
  return h(
    "div",
    { class: "diff-box" },
    h("p", { class: "kind-note" }, diff.summary),
    diff.hunks.length > 0 &&
      h(
        "div",
        { "data-testid": "diff", class: "diff", role: "region", tabindex: 0, "aria-label": `Diff of ${diff.newPath?.replace(/^b\//, "") || path}: ${added} added, ${removed} removed` },
        h("div", { class: "diff-file" }, h("code", {}, diff.newPath === "/dev/null" ? diff.oldPath : diff.newPath), ` +${added} −${removed}`),
        diff.hunks.map((hunk) =>
          h(
            "pre",
            { class: "hunk" },
            h("span", { class: "diff-line hunk-head" }, hunk.header),
            hunk.lines.map((l) =>
              h(
                "span",
                { class: `diff-line ${SIGN_CLASS[l.sign]}`, "data-sign": l.sign },
                h("span", { class: "ln", "aria-hidden": "true" }, String(l.oldNo ?? "")),
                h("span", { class: "ln", "aria-hidden": "true" }, String(l.newNo ?? "")),
                h("span", { class: "sign" }, l.sign),
                l.text,
              ),
            ),
          ),
        ),
      ),
  );
}

// -- terminal --------------------------------------------------------------------------------

/** A shell call's recorded result: {exit (number|null), status (its first line), output}. */
export function parseShell(result) {
  const text = String(result ?? "");
  const cut = text.indexOf("\n");
  const first = cut < 0 ? text : text.slice(0, cut);
  const output = cut < 0 ? "" : text.slice(cut + 1);
  const code = first.match(/^exit code: (-?\d+)/);
  return { exit: code ? Number(code[1]) : null, status: first, output: code || /^(timed out|cancelled)/.test(first) ? output : text };
}

function terminalBody(call) {
  const command = call.arguments?.command ?? "";
  const running = call.status === "running";
  const shell = call.result === null ? null : parseShell(call.result);
  let exit = running ? "running…" : call.status.replace("_", " ");
  if (shell) exit = shell.exit === null ? shell.status : `exit ${shell.exit}${shell.status.slice(`exit code: ${shell.exit}`.length)}`;
  const ok = shell?.exit === 0;
  return h(
    "div",
    { "data-testid": "terminal", class: "terminal", role: "group", "aria-label": `Terminal: ${command || call.tool}` },
    h("div", { class: "term-head" }, h("code", { class: "term-command" }, `$ ${command}`)),
    h(
      "pre",
      { "data-testid": running ? "tool-progress" : "terminal-output", class: "term-body", tabindex: 0, "aria-label": running ? "output so far" : "output" },
      running ? call.progress || "" : shell?.output ?? "",
    ),
    h("div", { "data-testid": "exit-status", class: `term-exit ${shell ? (ok ? "exit-ok" : "exit-bad") : ""}`.trim() }, `${ok ? "✓" : shell ? "✗" : "…"} ${exit}`),
  );
}

// -- reads -----------------------------------------------------------------------------------

export function readTarget(args) {
  if (!args) return "";
  if (args.path) return args.path;
  if (args.pattern) return args.glob ? `${args.pattern} in ${args.glob}` : args.pattern;
  return "";
}

function readBody(call) {
  const count = call.result ? String(call.result).split("\n").length : 0;
  return h(
    "details",
    { "data-testid": "read", class: "read" },
    h("summary", {}, h("code", {}, readTarget(call.arguments) || call.tool), call.result !== null ? ` (${count} line${count === 1 ? "" : "s"})` : ""),
    call.result !== null && h("pre", { class: "result" }, String(call.result).slice(0, 20000)),
  );
}

// -- todos and plans -------------------------------------------------------------------------

const TODO_MARK = { pending: "☐", in_progress: "◐", completed: "☑" };
const TODO_WORD = { pending: "to do", in_progress: "in progress", completed: "done" };

/** The checklist of a todo list ([{task, status}]): the session's panel and the call's card. */
export function todoList(todos, attrs = {}) {
  if (!Array.isArray(todos) || todos.length === 0) return h("p", { class: "kind-note" }, "No todos yet.");
  return h(
    "ul",
    { class: "todos", ...attrs },
    todos.map((t) =>
      h(
        "li",
        { "data-testid": "todo", "data-status": t.status, class: `todo todo-${t.status}` },
        h("span", { class: "todo-mark", "aria-hidden": "true" }, TODO_MARK[t.status] ?? "•"),
        " ",
        h("span", { class: "todo-task" }, t.task ?? ""),
        " ",
        h("span", { class: "todo-word" }, `(${TODO_WORD[t.status] ?? t.status})`),
      ),
    ),
  );
}

function todoBody(call) {
  return todoList(call.arguments?.todos);
}

function planBody(call) {
  return h("div", { class: "plan" }, h("pre", { class: "plan-text" }, call.arguments?.plan ?? ""), call.result !== null && h("p", { class: "kind-note" }, String(call.result)));
}

// -- subagents -------------------------------------------------------------------------------

function subagentBody(call) {
  return h(
    "details",
    { "data-testid": "subagent", class: "subagent", "data-child": call.childSession ?? "" },
    h("summary", {}, "Subagent transcript", call.arguments?.task ? `: ${call.arguments.task}` : ""),
    h("ol", { class: "log child-log", "data-testid": "child-log", "aria-label": "Subagent events" }),
    call.result !== null && h("p", { class: "kind-note" }, h("strong", {}, "Answered: "), String(call.result)),
  );
}

const BODIES = { diff: diffBody, terminal: terminalBody, read: readBody, todo: todoBody, plan: planBody, subagent: subagentBody };

/** The body of `call` ({tool, kind, status, arguments, result, progress, childSession}) by its
 * kind; null for none (the generic card's result). */
export function kindBody(call) {
  const body = BODIES[call.kind];
  return body ? body(call) : null;
}
