// Hash routes: #/ (sessions list, ?state= filters), #/sessions/<id>, #/sessions/<id>/trace.

/** The route a hash names: {view, id, params}. */
export function parseRoute(hash) {
  const [path, query = ""] = (hash.replace(/^#/, "") || "/").split("?");
  const params = new URLSearchParams(query);
  let match = path.match(/^\/sessions\/([^/]+)\/trace\/?$/);
  if (match) return { view: "trace", id: decodeURIComponent(match[1]), params };
  match = path.match(/^\/sessions\/([^/]+)\/?$/);
  if (match) return { view: "session", id: decodeURIComponent(match[1]), params };
  return { view: "sessions", id: null, params };
}

export const sessionHash = (id) => `#/sessions/${encodeURIComponent(id)}`;
export const traceHash = (id) => `${sessionHash(id)}/trace`;

/** A new session's id: what "New session" opens (the first prompt creates it). */
export function newSessionId(random = () => Math.random()) {
  const stamp = new Date().toISOString().slice(0, 19).replace(/[-:]/g, "").replace("T", "-");
  const tail = Math.floor(random() * 36 ** 4).toString(36).padStart(4, "0");
  return `s-${stamp}-${tail}`;
}
