// The public HTTP API, with the bearer token the person enters once per tab.
//
// A 401 asks for a token (`askToken`, the login form), keeps it in sessionStorage and repeats
// the request; every other non-2xx answer is an ApiError carrying the API's `code` and
// `message`, which the page shows as they are.

const TOKEN_KEY = "fxdurable.token";

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message || `HTTP ${status}`);
    this.status = status;
    this.code = code;
  }
}

/** The API's base path: the console lives at <base>/console/ (a Lambda stage, a proxy
 * prefix), the API at <base>/. */
export function basePath(pathname) {
  const at = pathname.indexOf("/console");
  return at < 0 ? "" : pathname.slice(0, at);
}

export class Api {
  constructor({ base = "", fetch = globalThis.fetch.bind(globalThis), storage = globalThis.sessionStorage, askToken }) {
    this.base = base;
    this.fetch = fetch;
    this.storage = storage;
    this.askToken = askToken;
    this.#asking = null;
  }

  #asking;

  get token() {
    return this.storage?.getItem(TOKEN_KEY) || null;
  }

  set token(value) {
    if (value) this.storage?.setItem(TOKEN_KEY, value);
    else this.storage?.removeItem(TOKEN_KEY);
  }

  #headers(body) {
    const headers = { Accept: "application/json, application/x-ndjson" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    return headers;
  }

  // One login form for every request that saw a 401 at the same time.
  async #newToken() {
    if (!this.#asking) {
      const refused = this.token !== null; // we sent one, and the server said 401 to it
      this.#asking = Promise.resolve(this.askToken({ refused })).finally(() => {
        this.#asking = null;
      });
    }
    this.token = await this.#asking;
  }

  /** The raw Response of a 2xx answer (a stream's body unread); ApiError otherwise. */
  async response(method, path, { body, signal, headers } = {}) {
    for (;;) {
      const response = await this.fetch(this.base + path, {
        method,
        headers: { ...this.#headers(body), ...headers },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal,
        cache: "no-store",
      });
      if (response.status === 401 && this.askToken) {
        await response.body?.cancel();
        await this.#newToken();
        continue;
      }
      if (!response.ok) throw await errorOf(response);
      return response;
    }
  }

  /** The JSON body of a 2xx answer. */
  async json(method, path, options) {
    const response = await this.response(method, path, options);
    return response.json();
  }

  sessions({ states = [], after = null, limit = 50 } = {}) {
    const query = new URLSearchParams();
    for (const s of states) query.append("state", s);
    if (after) query.set("after", after);
    query.set("limit", String(limit));
    return this.json("GET", `/sessions?${query}`);
  }

  session(id) {
    return this.json("GET", `/sessions/${encodeURIComponent(id)}`);
  }

  history(id) {
    return this.json("GET", `/sessions/${encodeURIComponent(id)}/history`);
  }

  trace(id) {
    return this.json("GET", `/sessions/${encodeURIComponent(id)}/trace`);
  }

  /** GET /chat from `cursor`: a stream (or, in receipt mode, one long poll's lines). */
  follow(id, cursor, signal) {
    const query = new URLSearchParams({ sessionId: id, cursor: String(cursor) });
    return this.response("GET", `/chat?${query}`, { signal });
  }

  /** POST /chat: a stream of the turn (200), or a receipt (202, Lambda). */
  chat(id, prompt, { idempotencyKey, agent, signal } = {}) {
    const body = { sessionId: id, prompt };
    if (agent) body.agent = agent; // needed when the server has several agents
    return this.response("POST", "/chat", {
      body,
      signal,
      headers: idempotencyKey ? { "Idempotency-Key": idempotencyKey } : {},
    });
  }

  steer(id, text) {
    return this.json("POST", "/steer", { body: { sessionId: id, text } });
  }

  abort(id) {
    return this.json("POST", "/abort", { body: { sessionId: id } });
  }

  answer(id, answer) {
    return this.json("POST", `/sessions/${encodeURIComponent(id)}/answer`, { body: answer });
  }

  fork(id, newSessionId, after) {
    const body = { newSessionId };
    if (after !== null && after !== undefined) body.after = after;
    return this.json("POST", `/sessions/${encodeURIComponent(id)}/fork`, { body });
  }

  /** GET /demo: the demo's state, or null when the server is not in demo mode. */
  async demo() {
    try {
      return await this.json("GET", "/demo");
    } catch (error) {
      if (error instanceof ApiError) return null;
      throw error;
    }
  }

  crash() {
    return this.json("POST", "/demo/crash");
  }

  /** GET that answers null for a 404 (a route this server does not have, or nothing yet). */
  async #optional(path) {
    try {
      return await this.json("GET", path);
    } catch (error) {
      if (error instanceof ApiError && (error.status === 404 || error.status === 405)) return null;
      throw error;
    }
  }

  /** GET /agents: the served agents and their tools' kinds; null from a server without it. */
  agents() {
    return this.#optional("/agents");
  }

  /** GET /sessions/{id}/calls: every tool call with its input; null before the session exists. */
  calls(id) {
    return this.#optional(`/sessions/${encodeURIComponent(id)}/calls`);
  }

  // The coding agent's routes (examples/coding_agent): null from a server without them.
  codingSettings(id) {
    return this.#optional(`/coding/sessions/${encodeURIComponent(id)}/settings`);
  }

  codingFiles(id) {
    return this.#optional(`/coding/sessions/${encodeURIComponent(id)}/files`);
  }

  codingFile(id, path) {
    const route = path.split("/").map(encodeURIComponent).join("/");
    return this.json("GET", `/coding/sessions/${encodeURIComponent(id)}/files/${route}`);
  }

  setPlanMode(id, on) {
    return this.json("PUT", `/coding/sessions/${encodeURIComponent(id)}/plan-mode`, { body: { on } });
  }

  /** "Yes, and don't ask again": the grant, and the pending question about it answered. */
  allowTool(id, tool) {
    return this.json("POST", `/coding/sessions/${encodeURIComponent(id)}/allowed-tools`, { body: { tool } });
  }

  revokeTool(id, tool) {
    return this.json("DELETE", `/coding/sessions/${encodeURIComponent(id)}/allowed-tools/${encodeURIComponent(tool)}`);
  }
}

async function errorOf(response) {
  let code = "http_error";
  let message = `HTTP ${response.status}`;
  try {
    const body = await response.json();
    code = body.code || code;
    message = body.message || message;
  } catch {
    // not JSON (a proxy's page): the status says enough
  }
  return new ApiError(response.status, code, message);
}
