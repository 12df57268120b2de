// The sessions list: GET /sessions, filtered by state, newest updated first.

import { h, toElement } from "../vnode.js";
import { newSessionId, sessionHash } from "../router.js";

export const STATES = ["idle", "queued", "running", "waiting"];
const STATE_WORD = {
  idle: "○ idle",
  queued: "◔ queued",
  running: "▶ running",
  waiting: "(?) waiting for an answer",
};

export function when(epochSeconds, now = Date.now()) {
  if (typeof epochSeconds !== "number") return "";
  const date = new Date(epochSeconds * 1000);
  const sameDay = new Date(now).toDateString() === date.toDateString();
  return sameDay ? date.toLocaleTimeString() : date.toLocaleString();
}

/** One session's row (pure: the tests read it). */
export function sessionRow(s) {
  return h(
    "li",
    { "data-testid": "session-row", "data-session-id": s.id, "data-state": s.state, class: `row state-${s.state}` },
    h("a", { href: sessionHash(s.id), class: "session-link" }, s.id),
    h(
      "dl",
      { class: "facts" },
      h("div", {}, h("dt", {}, "State"), h("dd", {}, STATE_WORD[s.state] || s.state)),
      h("div", {}, h("dt", {}, "Agent"), h("dd", {}, s.agent)),
      h("div", {}, h("dt", {}, "Last outcome"), h("dd", {}, s.lastOutcome || "none yet")),
      h("div", {}, h("dt", {}, "Unsettled"), h("dd", {}, String(s.unsettled ?? 0))),
      h("div", {}, h("dt", {}, "Updated"), h("dd", {}, h("time", {}, when(s.updatedAt)))),
    ),
    s.question && h("p", { class: "row-question" }, "Asks: ", s.question),
  );
}

export function sessionsView(root, api, params) {
  const selected = params.getAll("state").filter((s) => STATES.includes(s));
  const filter = toElement(
    h(
      "select",
      { id: "state-filter", "data-testid": "state-filter" },
      h("option", { value: "" }, "all states"),
      STATES.map((s) => h("option", { value: s, selected: selected[0] === s || null }, s)),
    ),
  );
  const list = toElement(h("ul", { "data-testid": "sessions-list", class: "sessions", "aria-labelledby": "sessions-title" }));
  const status = toElement(h("p", { role: "status", class: "note" }));
  const more = toElement(h("button", { type: "button", hidden: true }, "Show more"));
  const newButton = toElement(h("button", { type: "button", "data-testid": "new-session" }, "New session"));
  const refresh = toElement(h("button", { type: "button", "data-testid": "sessions-refresh" }, "Refresh"));
  const toolbar = toElement(h("div", { class: "toolbar" }, h("label", { for: "state-filter" }, "Show sessions in state")));
  toolbar.append(filter, refresh, newButton);
  root.append(toElement(h("h1", { id: "sessions-title" }, "Sessions")), toolbar, list, more, status);

  let next = null;
  let alive = true;

  async function load(append) {
    const states = filter.value ? [filter.value] : [];
    status.textContent = "Loading…";
    try {
      const page = await api.sessions({ states, after: append ? next : null });
      if (!alive) return;
      if (!append) list.replaceChildren();
      for (const s of page.sessions) list.append(toElement(sessionRow(s)));
      next = page.next ?? null;
      more.hidden = !next;
      const count = list.children.length;
      status.textContent = count ? `${count} session${count === 1 ? "" : "s"} shown.` : "No sessions in this state.";
    } catch (error) {
      if (alive) status.textContent = `Could not list sessions: ${error.message}`;
    }
  }

  filter.addEventListener("change", () => {
    history.replaceState(null, "", filter.value ? `#/?state=${filter.value}` : "#/");
    load(false);
  });
  more.addEventListener("click", () => load(true));
  refresh.addEventListener("click", () => load(false));
  newButton.addEventListener("click", () => {
    location.hash = sessionHash(newSessionId());
  });
  load(false);
  return {
    destroy() {
      alive = false;
    },
  };
}
