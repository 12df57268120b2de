// After the "Crash worker (kill -9)" button: the lines that tell the recovery, as they arrive,
// are marked (a highlight and a word) and scrolled to, so the person sees the interruption,
// the call whose outcome is unknown, the check and the continuation without looking for them.

const STEP_OF = {
  "attempt.interrupted": "interrupted",
  "submission.interrupted": "interrupted",
  "attempt.started": "resumed",
  "tool.outcome_unknown": "outcome unknown",
  turn_end: "turn settled",
};

/** Whether `line` may be a step of a recovery (the page asks `Recovery.step` which). */
export function isRecoveryLine(line) {
  return line.type in STEP_OF || line.type === "tool.started" || line.type === "tool.completed";
}

export class Recovery {
  /** elementOf(cursor) is the drawn <li> of an item; status a live region to say the steps. */
  constructor({ timeline, elementOf, status }) {
    this.timeline = timeline;
    this.elementOf = elementOf;
    this.status = status;
    this.watching = false;
    this.steps = [];
  }

  start() {
    this.watching = true;
    this.steps = [];
    this.interrupted = false;
    this.unknown = false;
    this.checked = false;
    this.continued = false;
    this.#say("Worker killed: waiting for the recovery…");
  }

  /** The step `line` is of the recovery under watch, or null. Pure over the timeline. */
  step(line) {
    const data = line.data || {};
    if (line.type === "attempt.started") return this.interrupted ? `resumed on ${data.worker ?? "a new worker"}` : null;
    if (line.type === "tool.started") {
      if (!this.interrupted) return null;
      if ((data.run ?? 1) > 1) return `${data.tool} run again (${data.reason ?? "recovery"})`;
      if (this.continued) return null; // the first new call tells it; the rest is the turn
      if (this.unknown && !this.checked) return `the check: ${data.tool}`;
      return `continued: ${data.tool}`;
    }
    if (line.type === "tool.completed") return null;
    return STEP_OF[line.type] ?? null;
  }

  arrived(line) {
    const step = this.step(line);
    if (line.type === "attempt.interrupted" || line.type === "submission.interrupted") this.interrupted = true;
    if (line.type === "tool.outcome_unknown") this.unknown = true;
    if (!step) return;
    if (step.startsWith("the check")) this.checked = true;
    else if (step.startsWith("continued")) this.continued = true;
    // A tool line's place is its call's card (each call once).
    const tool = line.type.startsWith("tool.") ? this.timeline.tools.get(line.data?.task) : null;
    const el = this.elementOf(tool ? tool.anchor : line.cursor);
    if (el) {
      this.mark(el, step);
      el.scrollIntoView({ block: "center", behavior: matchMedia("(prefers-reduced-motion: reduce)").matches ? "auto" : "smooth" });
    }
    this.steps.push(step);
    this.#say(`After the crash: ${this.steps.join(" → ")}`);
    // One continuation after the check is the story; the turn's end closes it.
    if (line.type === "turn_end") this.watching = false;
  }

  /** Highlight `el` with the step's word (kept across redraws by the session view). */
  mark(el, step) {
    el.dataset.recovery = step;
    el.classList.add("recovery");
    if (!el.querySelector(":scope > .recovery-tag")) {
      const tag = document.createElement("span");
      tag.className = "recovery-tag";
      tag.textContent = `⟲ recovery: ${step}`;
      el.prepend(tag);
    }
  }

  #say(text) {
    if (!this.status) return;
    this.status.hidden = false;
    this.status.textContent = text;
  }
}
