// The session view: the live event log, the totals, the input box and the question box.
//
// One Follower reads GET /chat from cursor 0 on and keeps reading (reconnecting from its last
// cursor); a POST /chat's own stream is read into the same timeline for the quickest echo,
// and the timeline drops what it holds already.

import { answerBody, callArguments } from "../answers.js";
import { Follower } from "../follow.js";
import { kindsFromAgents } from "../kinds.js";
import { readLines } from "../ndjson.js";
import { renderItem, sessionTotalsText } from "../render.js";
import { newSessionId, sessionHash, traceHash } from "../router.js";
import { Timeline } from "../timeline.js";
import { h, toElement } from "../vnode.js";
import { ChildTranscript } from "./child.js";
import { panels } from "./panels.js";
import { isRecoveryLine, Recovery } from "./recovery.js";
import { sidebar } from "./sidebar.js";

const HINT =
  "Enter sends when the agent is idle and steers it while it works; Shift+Enter starts a new line; Esc aborts the running turn; /fork N forks after step #N (/fork alone opens the trace to pick one).";

// The tools' kinds, asked once per page (GET /agents; an empty map from a server without it).
let kindsOnce = null;
function kindsOf(api) {
  kindsOnce ??= api.agents().then(kindsFromAgents, () => new Map());
  return kindsOnce;
}

function newKey() {
  return globalThis.crypto?.randomUUID?.() ?? `k-${Date.now()}-${Math.random().toString(36).slice(2)}`;
}

export function sessionView(root, api, id) {
  const timeline = new Timeline();
  const elements = new Map(); // cursor -> its <li>
  const children = new Map(); // subagent task -> its ChildTranscript
  const side = sidebar(api, id);
  const panel = panels(api, id);

  const view = toElement(
    h(
      "section",
      { "data-testid": "session-view", class: "session", "aria-labelledby": "session-title" },
      h("h1", { id: "session-title" }, "Session ", h("code", {}, id)),
      h(
        "p",
        { class: "bar" },
        h(
          "span",
          {},
          "Connection: ",
          h("span", { "data-testid": "connection", role: "status", "aria-live": "polite" }, "idle"),
          " ",
          h("span", { class: "connection-detail note" }),
        ),
        h("span", {}, "Agent: ", h("span", { "data-testid": "turn-state", "aria-live": "polite" }, "idle")),
        h("a", { href: traceHash(id), "data-testid": "trace-link" }, "Trace and fork"),
      ),
      h("p", { "data-testid": "session-totals", class: "totals" }, sessionTotalsText(timeline.sessionTotals())),
      h("p", { "data-testid": "recovery-status", class: "recovery-status", role: "status", "aria-live": "polite", hidden: true }),
      h("p", { class: "note empty" }, "Nothing here yet. A new session starts with its first prompt below."),
      // role=log on a wrapper: the list keeps its list semantics (axe: listitem).
      h("div", { "data-testid": "event-log", role: "log", "aria-label": "Session events" }, h("ol", { class: "log" })),
      h(
        "form",
        { class: "composer" },
        h("label", { for: "prompt" }, "Message"),
        h("p", { id: "prompt-hint", class: "hint" }, HINT),
        h("textarea", { id: "prompt", "data-testid": "prompt-input", rows: 3, "aria-describedby": "prompt-hint" }),
        h(
          "div",
          { class: "agent-field" },
          h("label", { for: "agent" }, "Agent (for a new session; leave empty when the server has one)"),
          h("input", { id: "agent", "data-testid": "agent-input", type: "text", autocomplete: "off" }),
        ),
        h(
          "div",
          { class: "buttons" },
          h("button", { type: "submit", "data-testid": "send-button" }, "Send"),
          h("button", { type: "button", "data-testid": "abort-button", class: "abort" }, "Abort (Esc)"),
        ),
        h("p", { class: "note composer-status", role: "status", "aria-live": "polite" }),
      ),
    ),
  );
  const layout = document.createElement("div");
  layout.className = "layout";
  layout.append(side.el, view, panel.el);
  root.append(layout);
  const $ = (testid) => view.querySelector(`[data-testid="${testid}"]`);
  const log = $("event-log").querySelector("ol");
  const input = $("prompt-input");
  const sendButton = $("send-button");
  const composerStatus = view.querySelector(".composer-status");
  const empty = view.querySelector(".empty");

  function note(text) {
    composerStatus.textContent = text;
  }

  // -- drawing -----------------------------------------------------------------------------

  function insert(el, cursor) {
    let before = null;
    for (let node = log.lastElementChild; node; node = node.previousElementSibling) {
      if (Number(node.dataset.cursor) < cursor) break;
      before = node;
    }
    log.insertBefore(el, before);
  }

  function draw(cursor) {
    const el = toElement(renderItem(timeline, cursor, questionActions(cursor)));
    const old = elements.get(cursor);
    if (old) {
      // A redraw keeps what the person opened (a read's text, a subagent's transcript) and
      // the recovery highlight.
      for (const details of old.querySelectorAll("details[open][data-testid]")) {
        el.querySelector(`details[data-testid="${details.dataset.testid}"]`)?.setAttribute("open", "");
      }
      if (old.dataset.recovery) recovery.mark(el, old.dataset.recovery);
      old.replaceWith(el);
    } else insert(el, cursor);
    elements.set(cursor, el);
    attachChild(el);
  }

  function attachChild(el) {
    const details = el.querySelector("details[data-testid=subagent]");
    if (!details) return;
    const task = el.querySelector("[data-testid=tool-call]")?.dataset.task;
    const childId = details.dataset.child;
    if (!childId) {
      details.addEventListener("toggle", () => details.open && loadCalls(), { once: true });
      return;
    }
    if (!children.has(task)) children.set(task, new ChildTranscript(api, childId, timeline.kinds));
    children.get(task).attach(details);
  }

  function refreshState() {
    const question = timeline.pendingQuestion;
    $("turn-state").textContent = question ? "waiting for your answer" : timeline.busy ? "working" : "idle";
    sendButton.textContent = timeline.busy ? "Steer" : "Send";
    $("session-totals").textContent = sessionTotalsText(timeline.sessionTotals());
    empty.hidden = timeline.items.size > 0;
    view.querySelector(".agent-field").hidden = timeline.agent !== null || panel.coding;
  }

  function redraw(cursors) {
    for (const cursor of new Set(cursors)) if (timeline.items.has(cursor)) draw(cursor);
  }

  // The calls' inputs (a diff's path, a command), read when a call appears; one request at a
  // time, and one more if calls appeared while it ran.
  let callsLoading = null;
  let callsAgain = false;
  function loadCalls() {
    if (callsLoading) {
      callsAgain = true;
      return callsLoading;
    }
    callsLoading = api
      .calls(id)
      .then((body) => redraw(timeline.setCalls(body?.calls)))
      .catch((error) => console.warn("calls not read", error))
      .finally(() => {
        callsLoading = null;
        if (callsAgain) {
          callsAgain = false;
          loadCalls();
        }
      });
    return callsLoading;
  }

  const WORKSPACE_KINDS = new Set(["diff", "terminal"]);
  function afterLine(line) {
    const type = line.type;
    const data = line.data || {};
    if (type === "tool.started" || type === "input.requested") loadCalls();
    if (type.startsWith("tool.") && timeline.kinds.get(data.tool) === "subagent") loadCalls(); // its child session
    if (type.startsWith("tool.") && type !== "tool.started" && WORKSPACE_KINDS.has(timeline.kinds.get(data.tool))) panel.refreshFiles();
    if (type === "state.changed" && data.set && "todos" in data.set) panel.showTodos(timeline.todos);
    if (type === "state.changed" || type === "input.answered" || type === "turn_end") panel.refreshSettings();
    if (["turn_start", "turn_end", "input.requested", "input.answered"].includes(type)) side.refresh(); // its state word
    if (type === "turn_end") panel.refreshFiles();
  }

  function onLine(line) {
    const changed = timeline.ingest(line);
    if (changed.length === 0) return;
    const atBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
    for (const cursor of changed) draw(cursor);
    refreshState();
    afterLine(line);
    if (recovery.watching && isRecoveryLine(line)) recovery.arrived(line);
    else if (atBottom && !recovery.watching) window.scrollTo(0, document.body.scrollHeight);
  }

  // After the crash button (app.js sends "fxd:crash"): scroll to and highlight the
  // interruption and the recovery as they arrive.
  const recovery = new Recovery({ timeline, elementOf: (cursor) => elements.get(cursor), status: view.querySelector("[data-testid=recovery-status]") });
  const onCrash = () => {
    recovery.start();
    follower.kick();
  };
  window.addEventListener("fxd:crash", onCrash);
  kindsOf(api).then((kinds) => {
    redraw(timeline.setKinds(kinds));
    if (timeline.tools.size) loadCalls();
  });

  // -- the stream ----------------------------------------------------------------------------

  const follower = new Follower({
    open: (cursor, signal) => api.follow(id, cursor, signal),
    onLine,
    onStatus: (status, error) => {
      $("connection").textContent = status;
      const detail = status === "idle" && timeline.items.size === 0 ? "(no session yet)" : "";
      view.querySelector(".connection-detail").textContent = error ? `(${error.message || error})` : detail;
    },
  });
  follower.start(0);
  const posts = new AbortController(); // POST /chat streams end with the view

  async function fork(command) {
    const after = command.match(/^\/fork\s+#?(\d+)\s*$/);
    if (!after) {
      location.hash = traceHash(id); // every step's "Fork here" is there
      return;
    }
    const newId = newSessionId();
    await api.fork(id, newId, Number(after[1]));
    location.hash = sessionHash(newId);
  }

  async function submit() {
    const text = input.value;
    if (!text.trim()) return;
    input.value = "";
    try {
      if (/^\/fork\b/.test(text.trim())) {
        await fork(text.trim());
        return;
      }
      if (timeline.busy) {
        const reply = await api.steer(id, text);
        note(reply.steered ? "Steering sent: the model reads it at its next call." : "Nothing was running: it became a new turn.");
      } else {
        const agent = timeline.agent ?? view.querySelector("[data-testid=agent-input]").value.trim();
        const response = await api.chat(id, text, { idempotencyKey: newKey(), agent, signal: posts.signal });
        note("Sent.");
        if (response.status !== 202) {
          readLines(response, onLine).catch(() => {}); // the follower carries on if this drops
        } else {
          await response.json(); // a receipt (Lambda): the follower's long polls bring the lines
        }
      }
      follower.kick();
    } catch (error) {
      input.value = text; // nothing was sent: keep what was typed
      note(`Not sent: ${error.message}`);
    }
  }

  async function abort() {
    try {
      const reply = await api.abort(id);
      note(reply.aborted.length ? `Abort requested for ${reply.aborted.length} submission(s).` : "Nothing to abort.");
      follower.kick();
    } catch (error) {
      note(`Abort failed: ${error.message}`);
    }
  }

  view.querySelector("form.composer").addEventListener("submit", (event) => {
    event.preventDefault();
    submit();
  });
  $("abort-button").addEventListener("click", abort);
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      submit();
    } else if (event.key === "Escape") {
      event.preventDefault();
      event.stopPropagation(); // the page's own Esc (below) must not abort twice
      abort();
    }
  });
  // Esc interrupts from anywhere on the page while a turn runs, except where Esc means
  // something else (a dialog, another field being edited).
  const onPageKey = (event) => {
    if (event.key !== "Escape" || !timeline.busy || document.querySelector("dialog[open]")) return;
    const target = event.target;
    if (target instanceof HTMLElement && target.matches("input, textarea, select")) return;
    event.preventDefault();
    abort();
  };
  document.addEventListener("keydown", onPageKey);

  // -- the question box ----------------------------------------------------------------------

  function questionActions(cursor) {
    if (timeline.items.get(cursor)?.type !== "input.requested") return undefined;
    const box = (event) => event.target.closest("[data-testid=question]");
    const say = (event, text) => {
      box(event).querySelector(".answer-error").textContent = text;
    };
    async function send(event, body) {
      const buttons = box(event).querySelectorAll("button");
      buttons.forEach((b) => (b.disabled = true));
      try {
        await api.answer(id, body);
        say(event, `Answered ${body.answer}; the turn resumes.`);
        follower.kick();
      } catch (error) {
        say(event, `Not answered: ${error.message}`);
      } finally {
        buttons.forEach((b) => (b.disabled = false));
      }
    }
    const tool = timeline.items.get(cursor).line.data.tool;
    return {
      allow: (event) => send(event, answerBody("allow")),
      allowAlways:
        panel.coding && tool
          ? async (event) => {
              try {
                const reply = await panel.allowAlways(tool);
                say(event, reply.answered ? `Yes; ${tool} runs without asking from now on (revocable in "Don't ask again").` : `${tool} will not ask again.`);
                follower.kick();
              } catch (error) {
                say(event, `Not answered: ${error.message}`);
              }
            }
          : undefined,
      deny: (event) => {
        const reason = box(event).querySelector("[data-testid=answer-reason]").value;
        send(event, answerBody("deny", { reason }));
      },
      edit: async (event) => {
        const button = event.currentTarget;
        const form = box(event).querySelector("[data-testid=answer-edit-form]");
        const textarea = form.querySelector("[data-testid=answer-input]");
        form.hidden = !form.hidden;
        button.setAttribute("aria-expanded", String(!form.hidden));
        if (form.hidden) return;
        if (!textarea.value) {
          try {
            const history = await api.history(id);
            textarea.value = callArguments(history.messages, timeline.items.get(cursor).line.data);
          } catch (error) {
            textarea.value = "{}";
            say({ target: form }, `Could not read the call's input: ${error.message}`);
          }
        }
        textarea.focus();
      },
      submitEdit: (event) => {
        const inputText = box(event).querySelector("[data-testid=answer-input]").value;
        try {
          send(event, answerBody("rewrite", { inputText }));
        } catch (error) {
          say(event, error.message);
        }
      },
    };
  }

  return {
    timeline,
    follower,
    destroy() {
      follower.stop();
      posts.abort();
      side.destroy();
      panel.destroy();
      for (const child of children.values()) child.stop();
      window.removeEventListener("fxd:crash", onCrash);
      document.removeEventListener("keydown", onPageKey);
    },
  };
}
