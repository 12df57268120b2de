// A subagent call's child transcript: the child session's lines (GET /chat of the child's
// public id), folded by its own Timeline and drawn into the call's collapsible list. It
// follows only while its list is open: a closed card costs no connection.

import { Follower } from "../follow.js";
import { renderItem } from "../render.js";
import { Timeline } from "../timeline.js";
import { toElement } from "../vnode.js";

export class ChildTranscript {
  constructor(api, childId, kinds) {
    this.timeline = new Timeline();
    this.timeline.setKinds(kinds);
    this.elements = new Map();
    this.list = document.createElement("ol");
    this.list.className = "log child-log";
    this.list.dataset.testid = "child-log";
    this.list.setAttribute("aria-label", `Subagent session ${childId}`);
    this.follower = new Follower({
      open: (cursor, signal) => api.follow(childId, cursor, signal),
      onLine: (line) => this.#onLine(line),
    });
    this.following = false;
  }

  #onLine(line) {
    for (const cursor of this.timeline.ingest(line)) {
      const el = toElement(renderItem(this.timeline, cursor));
      const old = this.elements.get(cursor);
      if (old) old.replaceWith(el);
      else {
        let before = null;
        for (let node = this.list.lastElementChild; node; node = node.previousElementSibling) {
          if (Number(node.dataset.cursor) < cursor) break;
          before = node;
        }
        this.list.insertBefore(el, before);
      }
      this.elements.set(cursor, el);
    }
  }

  /** Put this transcript's list into (a redrawn) `details`, following while it is open. */
  attach(details) {
    details.querySelector("[data-testid=child-log]")?.replaceWith(this.list);
    const sync = () => {
      if (details.open && !this.following) {
        this.following = true;
        this.follower.start(this.follower.cursor);
      } else if (!details.open && this.following) {
        this.following = false;
        this.follower.stop();
      }
    };
    details.addEventListener("toggle", sync);
    sync();
  }

  stop() {
    this.following = false;
    this.follower.stop();
  }
}
