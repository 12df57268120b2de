// The console's entry point: the hash router, the login form and the demo's crash button
// (in the sticky header: always in view; the session view highlights the recovery).
//
// Routes: #/ (sessions list), #/sessions/<id> (session view), #/sessions/<id>/trace.

import { Api, basePath } from "./api.js";
import { parseRoute } from "./router.js";
import { sessionsView } from "./views/sessions.js";
import { sessionView } from "./views/session.js";
import { traceView } from "./views/trace.js";

const main = document.getElementById("main");

function askToken({ refused = false } = {}) {
  const section = document.getElementById("login");
  document.getElementById("login-note").textContent = refused
    ? "The server refused that token (401). Enter the right one."
    : "The server answered 401: it needs your API token.";
  const form = document.getElementById("login-form");
  const input = document.getElementById("token");
  section.hidden = false;
  input.focus();
  return new Promise((resolve) => {
    form.addEventListener(
      "submit",
      (event) => {
        event.preventDefault();
        section.hidden = true;
        resolve(input.value.trim());
        input.value = "";
      },
      { once: true },
    );
  });
}

const api = new Api({ base: basePath(location.pathname), askToken });
let current = null;

function route() {
  current?.destroy?.();
  main.replaceChildren();
  const { view, id, params } = parseRoute(location.hash);
  if (view === "trace") current = traceView(main, api, id);
  else if (view === "session") current = sessionView(main, api, id);
  else current = sessionsView(main, api, params);
  const heading = main.querySelector("h1");
  if (heading) {
    heading.tabIndex = -1;
    heading.focus({ preventScroll: true }); // a screen reader hears the new page's title
  }
}

async function setUpDemo() {
  const demo = await api.demo();
  if (!demo) return;
  const box = document.getElementById("demo");
  const status = document.getElementById("demo-status");
  const button = box.querySelector("[data-testid=crash-button]");
  box.hidden = false;
  status.textContent = `Demo mode: worker pid ${demo.worker}.`;
  button.addEventListener("click", async () => {
    button.disabled = true;
    status.textContent = "Crashing the worker…";
    // The open session view starts watching now: the recovery's lines may come before the
    // answer does.
    window.dispatchEvent(new CustomEvent("fxd:crash"));
    try {
      const crash = await api.crash();
      status.textContent = `Killed worker pid ${crash.killed} (kill -9); new worker pid ${crash.worker}. The turn recovers on it.`;
    } catch (error) {
      status.textContent = `Crash failed: ${error.message}`;
    } finally {
      button.disabled = false;
    }
  });
}

window.addEventListener("hashchange", route);
route();
setUpDemo().catch((error) => console.warn("demo check failed", error));
