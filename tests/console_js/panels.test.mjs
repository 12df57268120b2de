import assert from "node:assert/strict";
import { test } from "node:test";

import { Timeline } from "../../fxdurable/console/static/timeline.js";
import { byTestId, findAll, textOf } from "../../fxdurable/console/static/vnode.js";
import { filesList, grantsList } from "../../fxdurable/console/static/views/panels.js";
import { Recovery } from "../../fxdurable/console/static/views/recovery.js";
import { sidebarRow } from "../../fxdurable/console/static/views/sidebar.js";
import { crashTurn } from "./lines.mjs";

test("the files panel marks changed files in words and lists deleted ones", () => {
  const node = filesList({
    files: [
      { path: "shop/cart.py", size: 812, status: "modified" },
      { path: "notes.txt", size: 3, status: "added" },
      { path: "tests/test_cart.py", size: 9, status: "unchanged" },
    ],
    deleted: ["old.py"],
  });
  assert.equal(textOf(findAll(node, byTestId("files-summary"))[0]), "3 files · 3 changed");
  const files = findAll(node, byTestId("file"));
  assert.deepEqual(files.map((f) => [f.attrs["data-path"], f.attrs["data-status"]]), [
    ["shop/cart.py", "modified"], ["notes.txt", "added"], ["tests/test_cart.py", "unchanged"], ["old.py", "deleted"],
  ]);
  assert.match(textOf(files[0]), /Mshop\/cart\.py \(modified\)/);
  assert.equal(textOf(files[2]), "tests/test_cart.py");
});

test("each don't-ask-again grant has a revoke button; none says every command asks", () => {
  const grants = grantsList(["shell"]);
  const revoke = findAll(grants, byTestId("revoke"));
  assert.equal(revoke.length, 1);
  assert.equal(revoke[0].attrs["data-tool"], "shell");
  assert.match(revoke[0].attrs["aria-label"], /ask again before shell/);
  assert.match(textOf(grantsList([])), /every shell command asks you first/);
});

test("the sidebar marks the open session for a screen reader and by its state's word", () => {
  const row = sidebarRow({ id: "s-1", state: "waiting", question: "Run it?" }, "s-1");
  const link = row.children[0];
  assert.equal(link.attrs["aria-current"], "page");
  assert.match(textOf(row), /s-1 waiting, asks you/);
  assert.equal(sidebarRow({ id: "s-2", state: "idle" }, "s-1").children[0].attrs["aria-current"], null);
});

test("after a crash press the recovery is told step by step: interrupted, resumed, unknown, the check, the end", () => {
  const timeline = new Timeline();
  const said = { hidden: true, textContent: "" };
  const recovery = new Recovery({ timeline, elementOf: () => undefined, status: said });
  for (const line of crashTurn.slice(0, 11)) timeline.ingest(line); // the deploy runs
  recovery.start();
  assert.equal(recovery.watching, true);
  for (const line of crashTurn.slice(11)) {
    timeline.ingest(line);
    recovery.arrived(line);
  }
  assert.deepEqual(recovery.steps, ["interrupted", "resumed on host:2", "outcome unknown", "the check: check_deployment", "turn settled"]);
  assert.equal(said.hidden, false);
  assert.match(said.textContent, /^After the crash: interrupted → resumed on host:2 → outcome unknown/);
  assert.equal(recovery.watching, false, "the turn's end closes it");
});

test("lines before any interruption are no recovery (a press while nothing runs)", () => {
  const recovery = new Recovery({ timeline: new Timeline(), elementOf: () => undefined, status: null });
  recovery.start();
  for (const line of crashTurn.slice(3, 9)) recovery.arrived(line);
  assert.deepEqual(recovery.steps, []);
});
