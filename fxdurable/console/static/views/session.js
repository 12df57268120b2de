// The session view: the live event log, the totals, the input box and the question box.
//
// One Follower reads GET /chat from cursor 0 on and keeps reading (reconnecting from its last
// cursor); a POST /chat's own stream is read into the same timeline for the quickest echo,
// and the timeline drops what it holds already.

import { answerBody, callArguments } from "../answers.js";
import { Follower } from "../follow.js";
import { readLines } from "../ndjson.js";
import { renderItem, sessionTotalsText } from "../render.js";
import { traceHash } from "../router.js";
import { Timeline } from "../timeline.js";
import { h, toElement } from "../vnode.js";

const HINT =
  "Enter sends when the agent is idle and steers it while it works; Shift+Enter starts a new line; Esc aborts the running turn.";

function newKey() {
  return globalThis.crypto?.randomUUID?.() ?? `k-${Date.now()}-${Math.random().toString(36).slice(2)}`;
}

export function sessionView(root, api, id) {
  const timeline = new Timeline();
  const elements = new Map(); // cursor -> its <li>

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
      h("p", { class: "note empty" }, "Nothing here yet. A new session starts with its first prompt below."),
      h("ol", { "data-testid": "event-log", class: "log", role: "log", "aria-label": "Session events" }),
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
  root.append(view);
  const $ = (testid) => view.querySelector(`[data-testid="${testid}"]`);
  const log = $("event-log");
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
    if (old) old.replaceWith(el);
    else insert(el, cursor);
    elements.set(cursor, el);
  }

  function refreshState() {
    const question = timeline.pendingQuestion;
    $("turn-state").textContent = question ? "waiting for your answer" : timeline.busy ? "working" : "idle";
    sendButton.textContent = timeline.busy ? "Steer" : "Send";
    $("session-totals").textContent = sessionTotalsText(timeline.sessionTotals());
    empty.hidden = timeline.items.size > 0;
    view.querySelector(".agent-field").hidden = timeline.agent !== null;
  }

  function onLine(line) {
    const changed = timeline.ingest(line);
    if (changed.length === 0) return;
    const atBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
    for (const cursor of changed) draw(cursor);
    refreshState();
    if (atBottom) window.scrollTo(0, document.body.scrollHeight);
  }

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

  async function submit() {
    const text = input.value;
    if (!text.trim()) return;
    input.value = "";
    try {
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
      abort();
    }
  });

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
    return {
      allow: (event) => send(event, answerBody("allow")),
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
    },
  };
}
