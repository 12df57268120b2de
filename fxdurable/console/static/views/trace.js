// The trace view: GET /sessions/{id}/trace (the `fxdurable trace` timeline) with a fork
// button on every line that is a fork point.

import { clock, plural } from "../render.js";
import { sessionHash } from "../router.js";
import { h, toElement } from "../vnode.js";

export function traceTotalsText(t) {
  const cost = t.costUsd == null ? "cost not reported" : `$${Number(t.costUsd).toFixed(4)}`;
  return (
    `Totals: ${plural(t.turns ?? 0, "turn")} · ${t.inputTokens ?? 0} input + ${t.outputTokens ?? 0} output tokens · ` +
    `${cost} · ${plural(t.attempts ?? 0, "attempt")} · ${plural(t.interruptions ?? 0, "interruption")}`
  );
}

/** One trace line (pure). `onFork(after)` opens the fork dialog at its boundary. */
export function traceLine(line, onFork) {
  const forkable = line.forkAfter !== null && line.forkAfter !== undefined;
  return h(
    "li",
    { "data-testid": "trace-line", "data-cursor": line.cursor ?? "", "data-kind": line.kind, class: `trace-line kind-${line.kind.replace(/[^a-z_-]/gi, "-")}` },
    h("span", { class: "meta" }, line.cursor != null ? `#${line.cursor} ` : "", h("time", {}, clock(line.at))),
    " ",
    h("span", { class: "text" }, line.text),
    forkable &&
      h(
        "button",
        {
          type: "button",
          class: "fork",
          "data-testid": "fork-button",
          "data-after": String(line.forkAfter),
          "aria-label": `Fork here: after ${typeof line.forkAfter === "number" ? `line #${line.forkAfter}` : `submission ${line.forkAfter}`}`,
          onclick: () => onFork(line.forkAfter),
        },
        "Fork here",
      ),
  );
}

export function traceView(root, api, id) {
  let alive = true;
  let forkAfter = null;
  const status = toElement(h("p", { role: "status", class: "note" }, "Loading the trace…"));
  const totals = toElement(h("p", { class: "totals" }));
  const list = toElement(h("ol", { class: "trace", "aria-label": "Trace lines" }));
  const dialog = toElement(
    h(
      "dialog",
      { class: "fork-dialog", "aria-labelledby": "fork-title" },
      h(
        "form",
        { method: "dialog" },
        h("h2", { id: "fork-title" }, "Fork into a new session"),
        h("p", { class: "fork-point" }),
        h("label", { for: "fork-id" }, "New session id"),
        h("input", { id: "fork-id", "data-testid": "fork-id-input", required: true, pattern: "[A-Za-z0-9._:\\-]{1,128}" }),
        h(
          "div",
          { class: "buttons" },
          h("button", { type: "submit", value: "fork", "data-testid": "fork-submit" }, "Fork"),
          h("button", { type: "button", class: "cancel" }, "Cancel"),
        ),
        h("p", { class: "fork-error", role: "status" }),
      ),
    ),
  );
  root.append(
    toElement(
      h(
        "section",
        { "data-testid": "trace-view", class: "trace-view", "aria-labelledby": "trace-title" },
        h("h1", { id: "trace-title" }, "Trace of ", h("code", {}, id)),
        h("p", {}, h("a", { href: sessionHash(id) }, "← Back to the session")),
      ),
    ),
  );
  const section = root.querySelector("[data-testid=trace-view]");
  section.append(totals, status, list, dialog);

  const idInput = dialog.querySelector("[data-testid=fork-id-input]");
  const error = dialog.querySelector(".fork-error");
  let forks = 0;

  function openFork(after) {
    forkAfter = after;
    forks += 1;
    const point = typeof after === "number" ? `line #${after}` : `submission ${after} settled`;
    dialog.querySelector(".fork-point").textContent = `From the conversation as it was after ${point}.`;
    idInput.value = `${id}-fork-${Date.now().toString(36)}${forks}`.slice(0, 128);
    error.textContent = "";
    dialog.showModal();
    idInput.select();
  }

  dialog.querySelector(".cancel").addEventListener("click", () => dialog.close());
  dialog.querySelector("form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const newId = idInput.value.trim();
    try {
      await api.fork(id, newId, forkAfter);
      dialog.close();
      location.hash = sessionHash(newId);
    } catch (err) {
      error.textContent = `Not forked: ${err.message}`;
    }
  });

  api
    .trace(id)
    .then((trace) => {
      if (!alive) return;
      list.replaceChildren(...trace.lines.map((line) => toElement(traceLine(line, openFork))));
      totals.textContent = traceTotalsText(trace.totals || {});
      status.textContent = `${plural(trace.lines.length, "line")}. Fork from any line with a "Fork here" button.`;
    })
    .catch((err) => {
      if (alive) status.textContent = `Could not load the trace: ${err.message}`;
    });

  return {
    destroy() {
      alive = false;
    },
  };
}
