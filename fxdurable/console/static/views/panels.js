// The session view's side panels: the live todo checklist (any agent whose state holds
// `todos`), and, on a server with the coding agent's routes (examples/coding_agent), plan
// mode, the "don't ask again" grants (each revocable) and the workspace's files with the ones
// the agent changed marked.

import { todoList } from "../kinds.js";
import { h, toElement } from "../vnode.js";

const FILE_MARK = { modified: "M", added: "A", unchanged: "" };

/** The files panel's list (pure): changed files first marked, deleted ones struck. */
export function filesList(body) {
  const files = body?.files ?? [];
  const changed = files.filter((f) => f.status !== "unchanged").length + (body?.deleted ?? []).length;
  return h(
    "div",
    {},
    h("p", { class: "note", "data-testid": "files-summary" }, `${files.length} file${files.length === 1 ? "" : "s"} · ${changed} changed`),
    h(
      "ul",
      { class: "files", "data-testid": "files-list" },
      files.map((f) =>
        h(
          "li",
          { "data-testid": "file", "data-path": f.path, "data-status": f.status, class: `file file-${f.status}` },
          h(
            "button",
            { type: "button", class: "file-open link", "data-path": f.path },
            h("span", { class: "file-mark", "aria-hidden": "true" }, FILE_MARK[f.status] ?? "?"),
            h("code", {}, f.path),
            f.status !== "unchanged" && h("span", { class: "file-word" }, ` (${f.status})`),
          ),
        ),
      ),
      (body?.deleted ?? []).map((path) =>
        h("li", { "data-testid": "file", "data-path": path, "data-status": "deleted", class: "file file-deleted" }, h("span", { class: "file-mark", "aria-hidden": "true" }, "D"), h("code", {}, path), " (deleted)"),
      ),
    ),
  );
}

/** The "don't ask again" grants (pure), each with its revoke button. */
export function grantsList(tools) {
  if (!tools || tools.length === 0) return h("p", { class: "note", "data-testid": "no-grants" }, "None: every shell command asks you first.");
  return h(
    "ul",
    { class: "grants", "data-testid": "grants" },
    tools.map((tool) =>
      h(
        "li",
        { "data-testid": "grant", "data-tool": tool },
        h("code", {}, tool),
        " runs without asking ",
        h("button", { type: "button", class: "small revoke", "data-tool": tool, "data-testid": "revoke", "aria-label": `Revoke: ask again before ${tool}` }, "Revoke"),
      ),
    ),
  );
}

export function panels(api, id, { onChange = () => {} } = {}) {
  const el = toElement(
    h(
      "aside",
      { class: "panels", "aria-label": "Session panels" },
      h("section", { class: "panel", "aria-labelledby": "todos-title", "data-testid": "todos-panel", hidden: true }, h("h2", { id: "todos-title" }, "Todos"), h("div", { class: "panel-body" })),
      h(
        "section",
        { class: "panel", "aria-labelledby": "plan-title", "data-testid": "plan-panel", hidden: true },
        h("h2", { id: "plan-title" }, "Plan mode"),
        h(
          "label",
          { class: "switch" },
          h("input", { type: "checkbox", "data-testid": "plan-toggle", role: "switch" }),
          " Read-only until I approve a plan",
        ),
        h("p", { class: "note plan-status", role: "status" }),
      ),
      h(
        "section",
        { class: "panel", "aria-labelledby": "grants-title", "data-testid": "grants-panel", hidden: true },
        h("h2", { id: "grants-title" }, "Don't ask again"),
        h("div", { class: "panel-body" }),
      ),
      h(
        "section",
        { class: "panel", "aria-labelledby": "files-title", "data-testid": "files-panel", hidden: true },
        h("h2", { id: "files-title" }, "Files"),
        h("div", { class: "panel-body" }),
        h("div", { class: "file-view", "data-testid": "file-view", hidden: true }),
      ),
    ),
  );
  const $ = (testid) => el.querySelector(`[data-testid="${testid}"]`);
  const toggle = $("plan-toggle");
  const planStatus = el.querySelector(".plan-status");
  let coding = false;
  let alive = true;

  // Shown once there is a list, or on the coding agent's server (whose agent keeps one).
  function showTodos(todos) {
    if (todos.length || coding) $("todos-panel").hidden = false;
    $("todos-panel").querySelector(".panel-body").replaceChildren(toElement(todoList(todos, { "data-testid": "todo-list" })));
  }

  function showSettings(settings) {
    if (!settings || !alive) return;
    coding = true;
    for (const panel of ["todos-panel", "plan-panel", "grants-panel", "files-panel"]) $(panel).hidden = false;
    toggle.checked = Boolean(settings.planMode);
    planStatus.textContent = settings.planMode ? "On: the agent can only read until you approve its plan." : "Off: the agent may edit and run commands (it asks before each shell command).";
    $("grants-panel").querySelector(".panel-body").replaceChildren(toElement(grantsList(settings.allowedTools)));
  }

  async function refreshSettings() {
    try {
      showSettings(await api.codingSettings(id));
    } catch (error) {
      planStatus.textContent = `Could not read the settings: ${error.message}`;
    }
  }

  async function refreshFiles() {
    if (!coding) return;
    try {
      const body = await api.codingFiles(id);
      if (body && alive) $("files-panel").querySelector(".panel-body").replaceChildren(toElement(filesList(body)));
    } catch (error) {
      $("files-panel").querySelector(".panel-body").textContent = `Could not list the files: ${error.message}`;
    }
  }

  toggle.addEventListener("change", async () => {
    toggle.disabled = true;
    try {
      showSettings(await api.setPlanMode(id, toggle.checked));
      onChange();
    } catch (error) {
      toggle.checked = !toggle.checked;
      planStatus.textContent = `Not changed: ${error.message}`;
    } finally {
      toggle.disabled = false;
    }
  });

  el.addEventListener("click", async (event) => {
    const revoke = event.target.closest("button.revoke");
    if (revoke) {
      try {
        showSettings(await api.revokeTool(id, revoke.dataset.tool));
      } catch (error) {
        planStatus.textContent = `Not revoked: ${error.message}`;
      }
      return;
    }
    const open = event.target.closest("button.file-open");
    if (open) await showFile(open.dataset.path);
  });

  async function showFile(path) {
    const view = $("file-view");
    try {
      const file = await api.codingFile(id, path);
      view.replaceChildren(
        toElement(
          h(
            "div",
            {},
            h("div", { class: "file-view-head" }, h("code", {}, file.path), ` (${file.status})`, h("button", { type: "button", class: "small file-close" }, "Close")),
            h("pre", { class: "file-content", tabindex: 0, "aria-label": `Content of ${file.path}` }, file.content ?? ""),
          ),
        ),
      );
      view.querySelector(".file-close").addEventListener("click", () => {
        view.hidden = true;
      });
      view.hidden = false;
    } catch (error) {
      view.textContent = `Could not read ${path}: ${error.message}`;
      view.hidden = false;
    }
  }

  showTodos([]);
  refreshSettings().then(refreshFiles);
  return {
    el,
    showTodos,
    refreshSettings,
    refreshFiles,
    get coding() {
      return coding;
    },
    /** "Yes, and don't ask again" for `tool`: the grant, and its pending question answered. */
    async allowAlways(tool) {
      const reply = await api.allowTool(id, tool);
      showSettings({ planMode: toggle.checked, allowedTools: reply.allowedTools });
      return reply;
    },
    destroy() {
      alive = false;
    },
  };
}
