// A tiny element description: render functions return these, so they are pure and testable
// in node; `toElement` turns one into DOM in the page.

/** h("li", {"data-testid": "event"}, "text", h(...)): falsy children are left out. */
export function h(tag, attrs, ...children) {
  return { tag, attrs: attrs || {}, children: children.flat(Infinity).filter((c) => c != null && c !== false && c !== "") };
}

/** The text a person reads in `node` (what a screen reader says, roughly). */
export function textOf(node) {
  if (typeof node === "string" || typeof node === "number") return String(node);
  if (!node || node.attrs.hidden) return "";
  return node.children.map(textOf).join("");
}

/** Every node under (and including) `node` that `match` accepts. */
export function findAll(node, match) {
  if (!node || typeof node !== "object") return [];
  const own = match(node) ? [node] : [];
  return own.concat(node.children.flatMap((c) => findAll(c, match)));
}

export const byTestId = (id) => (n) => n.attrs["data-testid"] === id;

/** DOM for `node`: attributes starting with "on" are event listeners, `value` a property. */
export function toElement(node, doc = document) {
  if (typeof node === "string" || typeof node === "number") return doc.createTextNode(String(node));
  const el = doc.createElement(node.tag);
  for (const [name, value] of Object.entries(node.attrs)) {
    if (value == null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      el.addEventListener(name.slice(2), value);
    } else if (name === "value") {
      el.value = value;
    } else {
      el.setAttribute(name, value === true ? "" : String(value));
    }
  }
  for (const child of node.children) el.appendChild(toElement(child, doc));
  return el;
}
