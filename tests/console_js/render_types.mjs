// Renders one line of each type named on the command line (data as given in a JSON object
// {type: data}), and prints what became of each: for tests/console/test_line_types.py.
import { renderItem } from "../../fxdurable/console/static/render.js";
import { Timeline } from "../../fxdurable/console/static/timeline.js";
import { textOf } from "../../fxdurable/console/static/vnode.js";

const samples = JSON.parse(process.argv[2]);
const out = {};
let cursor = 0;
for (const [type, data] of Object.entries(samples)) {
  const t = new Timeline();
  cursor += 1;
  const line = { cursor, type, sessionId: "s", turnId: "sub-1", at: 1_700_000_000, data };
  const changed = t.ingest(line);
  if (changed.length === 0) {
    out[type] = { item: false };
    continue;
  }
  const node = renderItem(t, cursor);
  out[type] = { item: true, class: node.attrs.class, kind: node.attrs["data-kind"], text: textOf(node) };
}
console.log(JSON.stringify(out));
