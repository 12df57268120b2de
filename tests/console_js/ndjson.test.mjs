import assert from "node:assert/strict";
import { test } from "node:test";

import { BadLineError, LineSplitter, readLines } from "../../fxdurable/console/static/ndjson.js";
import { crashTurn, ndjson } from "./lines.mjs";

function responseOf(chunks, { failAfter = null } = {}) {
  const encoder = new TextEncoder();
  let i = 0;
  const body = new ReadableStream({
    pull(controller) {
      if (failAfter !== null && i === failAfter) return controller.error(new TypeError("network error"));
      if (i === chunks.length) return controller.close();
      controller.enqueue(encoder.encode(chunks[i++]));
    },
  });
  return new Response(body);
}

function chunked(text, size) {
  const out = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out;
}

test("a line split across chunks is one line, blank lines are skipped", () => {
  const s = new LineSplitter();
  assert.deepEqual(s.push('{"a":'), []);
  assert.deepEqual(s.push('1}\n\n{"b"'), ['{"a":1}']);
  assert.deepEqual(s.push(":2}"), []);
  assert.deepEqual(s.end(), ['{"b":2}']);
});

test("readLines parses every line of a body that arrives in odd pieces, in order", async () => {
  const seen = [];
  const count = await readLines(responseOf(chunked(ndjson(crashTurn), 7)), (l) => seen.push(l.cursor));
  assert.equal(count, crashTurn.length);
  assert.deepEqual(seen, crashTurn.map((l) => l.cursor));
});

test("multi-byte characters split between chunks decode whole", async () => {
  const text = '{"cursor":1,"type":"x","data":{"t":"déployé ✓"}}\n';
  const bytes = new TextEncoder().encode(text);
  const body = new ReadableStream({
    start(c) {
      c.enqueue(bytes.slice(0, 40));
      c.enqueue(bytes.slice(40));
      c.close();
    },
  });
  const seen = [];
  await readLines(new Response(body), (l) => seen.push(l.data.t));
  assert.deepEqual(seen, ["déployé ✓"]);
});

test("a network error mid-body rejects after the lines that came whole", async () => {
  const seen = [];
  const body = ndjson(crashTurn.slice(0, 3));
  await assert.rejects(readLines(responseOf([body], { failAfter: 1 }), (l) => seen.push(l.cursor)), TypeError);
  assert.deepEqual(seen, [1, 2, 3]);
});

test("a line that is not JSON is an error (the reader reconnects from the last good one)", async () => {
  await assert.rejects(readLines(responseOf(["{oops\n"]), () => {}), BadLineError);
});
