// The sessions sidebar of the session view: GET /sessions, newest updated first, the open
// session marked (aria-current), a "New session" button. Refreshed when a turn starts or ends.

import { newSessionId, sessionHash } from "../router.js";
import { h, toElement } from "../vnode.js";

const STATE_MARK = { idle: "○", queued: "◔", running: "▶", waiting: "(?)" };

/** One sidebar row (pure). */
export function sidebarRow(s, currentId) {
  const current = s.id === currentId;
  return h(
    "li",
    { "data-testid": "sidebar-session", "data-session-id": s.id, "data-state": s.state, class: `side-row${current ? " current" : ""}` },
    h(
      "a",
      { href: sessionHash(s.id), "aria-current": current ? "page" : null },
      h("span", { class: "side-state", "aria-hidden": "true" }, STATE_MARK[s.state] ?? "•"),
      " ",
      h("span", { class: "side-id" }, s.id),
      h("span", { class: "side-word" }, ` ${s.state}${s.question ? ", asks you" : ""}`),
    ),
  );
}

export function sidebar(api, currentId) {
  const el = toElement(
    h(
      "nav",
      { class: "sidebar", "aria-label": "Sessions", "data-testid": "sidebar" },
      h("div", { class: "side-head" }, h("h2", {}, "Sessions"), h("button", { type: "button", "data-testid": "sidebar-new", class: "small" }, "New")),
      h("ul", { class: "side-list", "data-testid": "sidebar-list" }),
      h("p", { class: "note side-status", role: "status" }),
    ),
  );
  const list = el.querySelector("ul");
  const status = el.querySelector(".side-status");
  el.querySelector("[data-testid=sidebar-new]").addEventListener("click", () => {
    location.hash = sessionHash(newSessionId());
  });
  let alive = true;
  let loading = null;

  async function refresh() {
    if (loading) return loading; // one request at a time; a turn's start and end come close
    loading = (async () => {
      try {
        const page = await api.sessions({ limit: 30 });
        if (!alive) return;
        const rows = page.sessions.map((s) => toElement(sidebarRow(s, currentId)));
        list.replaceChildren(...rows);
        status.textContent = rows.length ? "" : "No sessions yet.";
      } catch (error) {
        if (alive) status.textContent = `Could not list sessions: ${error.message}`;
      } finally {
        loading = null;
      }
    })();
    return loading;
  }

  refresh();
  return {
    el,
    refresh,
    destroy() {
      alive = false;
    },
  };
}
