import assert from "node:assert/strict";
import { test } from "node:test";

import { backoffMs, Follower } from "../../fxdurable/console/static/follow.js";
import { Timeline } from "../../fxdurable/console/static/timeline.js";
import { crashTurn, marker, ndjson } from "./lines.mjs";

// A server over a journal: each GET /chat answers the lines after `cursor`. `plan` says, per
// request, how many lines it sends before the connection drops (null: all, then stream_end).
function server(journal, plan) {
  const requests = [];
  const open = async (cursor) => {
    const step = plan[requests.length] ?? { send: null };
    requests.push(cursor);
    if (step.status) throw Object.assign(new Error(`HTTP ${step.status}`), { status: step.status });
    if (step.refuse) throw new TypeError("Failed to fetch");
    const after = journal.filter((l) => l.cursor > cursor);
    const sent = step.send === null ? after : after.slice(0, step.send);
    const text = ndjson(step.send === null ? [...sent, marker(journal.at(-1).cursor, "stream_end", { reason: "idle" })] : sent);
    const encoder = new TextEncoder();
    let done = false;
    const body = new ReadableStream({
      pull(c) {
        if (done) return step.send === null ? c.close() : c.error(new TypeError("network error"));
        done = true;
        c.enqueue(encoder.encode(text));
      },
    });
    return new Response(body);
  };
  return { open, requests };
}

function follow(open, stopAfter) {
  const timeline = new Timeline();
  const seen = [];
  const statuses = [];
  const follower = new Follower({
    open,
    onLine: (line) => {
      seen.push(line.cursor);
      timeline.ingest(line);
    },
    onStatus: (s) => statuses.push(s),
    sleep: () => Promise.resolve(),
  });
  const realOpen = follower.open;
  follower.open = (cursor, signal) => {
    if (follower.connects > stopAfter) follower.stop();
    return realOpen(cursor, signal);
  };
  return { follower, timeline, seen, statuses };
}

test("a dropped stream resumes from the last cursor: every line once, in order", async () => {
  const s = server(crashTurn, [{ send: 7 }, { refuse: true }, { send: 5 }, { send: null }]);
  const { follower, timeline, statuses } = follow(s.open, 4);
  await follower.start(0);
  assert.deepEqual(s.requests, [0, 7, 7, 12, 20]);
  assert.deepEqual(timeline.cursors(), crashTurn.map((l) => l.cursor));
  // Each failure is reported (with its error), each success says live again.
  assert.deepEqual(statuses, ["live", "reconnecting", "reconnecting", "live", "reconnecting", "live", "idle"]);
});

test("lines the server repeats after a reconnect are not shown twice", async () => {
  // A server that answers from an older cursor than asked (a replica behind): the timeline
  // still holds each cursor once.
  let n = 0;
  const open = async () => {
    n += 1;
    const text = ndjson(n === 1 ? crashTurn.slice(0, 10) : crashTurn.slice(5));
    return new Response(text);
  };
  const { follower, timeline, seen } = follow(open, 2);
  await follower.start(0);
  assert.ok(seen.length > crashTurn.length); // it did see repeats...
  assert.deepEqual(timeline.cursors(), crashTurn.map((l) => l.cursor)); // ...and kept one of each
});

test("a session that does not exist yet waits, idle, until kicked", async () => {
  const s = server(crashTurn, [{ status: 404 }, { send: null }]);
  const { follower, timeline, statuses } = follow(s.open, 2);
  const done = follower.start(0);
  await new Promise((r) => setTimeout(r, 10));
  assert.equal(follower.status, "idle");
  assert.deepEqual(s.requests, [0]);
  follower.kick();
  await done;
  assert.equal(timeline.items.size, crashTurn.length);
  assert.deepEqual(statuses, ["live", "idle"]); // it was idle from the start: no news then
});

test("receipt mode: each long poll is a short body, and the next poll starts after it", async () => {
  // Lambda: GET /chat answers the lines there are (or a stream_end after its wait) and ends.
  const polls = [crashTurn.slice(0, 4), [marker(4, "stream_end", { reason: "idle" })], crashTurn.slice(4)];
  const asked = [];
  const open = async (cursor) => {
    asked.push(cursor);
    return new Response(ndjson(polls[asked.length - 1] ?? []));
  };
  const { follower, timeline } = follow(open, 3);
  await follower.start(0);
  assert.deepEqual(asked.slice(0, 3), [0, 4, 4]);
  assert.equal(timeline.items.size, crashTurn.length);
});

test("backoff doubles up to its cap", () => {
  assert.deepEqual([1, 2, 3, 4, 5, 6].map((n) => backoffMs(n)), [250, 500, 1000, 2000, 2000, 2000]);
});
