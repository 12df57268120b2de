// A session's timeline, built from its JSON lines (the HTTP API's chat stream vocabulary).
//
// Pure data, no DOM: `ingest(line)` folds one line in and says which items to (re)draw, so
// the page and the node tests share it. Every journal line is one item, keyed by its cursor:
// a line seen twice (a reconnect, or the POST stream and the follower both carrying it) is
// dropped the second time. `progress`, `keepalive` and `stream_end` are markers of the stream,
// not history: they never become items (progress updates its tool call in place).

export const MARKERS = new Set(["keepalive", "stream_end", "progress"]);
export const TOOL_SETTLED = new Set([
  "tool.completed",
  "tool.failed",
  "tool.cancelled",
  "tool.outcome_unknown",
  "tool.refused",
]);

// The usage counts a turn and a session sum (cache counts are parts of inputTokens).
function noUsage() {
  return { calls: 0, inputTokens: 0, outputTokens: 0, cacheReadTokens: 0, cacheCreationTokens: 0, costUsd: null };
}

function newTurn(id) {
  return { id, prompt: null, ...noUsage(), attempts: 0, interruptions: 0, outcome: null };
}

function addUsage(totals, data) {
  totals.calls += 1;
  totals.inputTokens += Number(data.input_tokens) || 0;
  totals.outputTokens += Number(data.output_tokens) || 0;
  // Parts of the input count: read from / written to the provider's prompt cache.
  totals.cacheReadTokens += Number(data.cache_read_tokens) || 0;
  totals.cacheCreationTokens += Number(data.cache_creation_tokens) || 0;
  if (typeof data.cost_usd === "number") totals.costUsd = (totals.costUsd ?? 0) + data.cost_usd;
}

export class Timeline {
  constructor() {
    this.items = new Map(); // cursor -> {cursor, type, line, hidden}
    this.tools = new Map(); // task id -> tool call (one per task; re-runs move its anchor)
    this.partials = new Map(); // "turn|round" -> streamed model text not recorded yet
    this.turns = new Map(); // turn id (= submission id) -> totals and outcome
    this.questions = new Map(); // cursor of input.requested -> {data, turnId, answer, closed}
    this.unsettled = new Set(); // submissions admitted and not settled
    this.lastCursor = 0;
    this.agent = null; // from session.created
    this.forkedAt = null; // a fork's session.created cursor: the state.changed after it is the copy
    this.kinds = new Map(); // tool name -> its declared kind (GET /agents)
    this.inputs = new Map(); // task id -> {arguments, childSession} (GET /sessions/{id}/calls)
    this.state = {}; // the session's persisted state, folded from state.changed
  }

  /** The tools' kinds (kinds.js kindsFromAgents). Returns the anchors to redraw. */
  setKinds(kinds) {
    this.kinds = kinds;
    return [...this.tools.values()].map((t) => t.anchor);
  }

  /** Merges GET /sessions/{id}/calls' calls: their inputs and child sessions. Returns the
   * anchors of the calls that changed. */
  setCalls(calls) {
    const changed = [];
    for (const call of calls || []) {
      const old = this.inputs.get(call.task);
      const next = { arguments: call.arguments ?? {}, childSession: call.childSession ?? null };
      if (old && JSON.stringify(old) === JSON.stringify(next)) continue;
      this.inputs.set(call.task, next);
      const tool = this.tools.get(call.task);
      if (tool) changed.push(tool.anchor);
    }
    return changed;
  }

  /** A tool call as kinds.js renders it: the record with its kind, input and child. */
  call(task) {
    const tool = this.tools.get(task);
    if (!tool) return null;
    const input = this.inputs.get(task);
    return { ...tool, kind: this.kinds.get(tool.tool) ?? null, arguments: input?.arguments ?? null, childSession: input?.childSession ?? null };
  }

  /** Tasks whose input this timeline has not read yet (the page asks for them). */
  get callsWithoutInput() {
    return [...this.tools.keys()].filter((task) => !this.inputs.has(task));
  }

  get todos() {
    return Array.isArray(this.state.todos) ? this.state.todos : [];
  }

  /** Folds one line in. Returns the cursors of items to draw or redraw (new first). */
  ingest(line) {
    if (!line || typeof line !== "object" || typeof line.type !== "string") return [];
    if (line.type === "progress") return this.#progress(line);
    if (MARKERS.has(line.type) || typeof line.cursor !== "number") return [];
    if (this.items.has(line.cursor)) return []; // seen already: no duplicates
    const item = { cursor: line.cursor, type: line.type, line, hidden: false };
    this.items.set(line.cursor, item);
    this.lastCursor = Math.max(this.lastCursor, line.cursor);
    const changed = this.#apply(item) || [];
    return [line.cursor, ...changed.filter((c) => c !== line.cursor)];
  }

  /** Cursors of all items, in order. */
  cursors() {
    return [...this.items.keys()].sort((a, b) => a - b);
  }

  get busy() {
    return this.unsettled.size > 0;
  }

  /** The question a turn waits on, or null. */
  get pendingQuestion() {
    for (const q of this.questions.values()) if (!q.answer && !q.closed) return q;
    return null;
  }

  sessionTotals() {
    const totals = { turns: 0, ...noUsage() };
    totals.attempts = 0;
    totals.interruptions = 0;
    for (const t of this.turns.values()) {
      totals.turns += 1;
      totals.calls += t.calls;
      totals.inputTokens += t.inputTokens;
      totals.outputTokens += t.outputTokens;
      totals.cacheReadTokens += t.cacheReadTokens;
      totals.cacheCreationTokens += t.cacheCreationTokens;
      totals.attempts += t.attempts;
      totals.interruptions += t.interruptions;
      if (t.costUsd !== null) totals.costUsd = (totals.costUsd ?? 0) + t.costUsd;
    }
    return totals;
  }

  turn(id) {
    if (id == null) return null;
    if (!this.turns.has(id)) this.turns.set(id, newTurn(id));
    return this.turns.get(id);
  }

  #progress(line) {
    const data = line.data || {};
    const tool = this.tools.get(data.task);
    if (!tool || tool.status !== "running" || tool.progress === data.text) return [];
    tool.progress = data.text;
    return [tool.anchor];
  }

  #apply(item) {
    const { line } = item;
    const data = line.data || {};
    const turn = this.turn(line.turnId ?? data.submission);
    switch (line.type) {
      case "session.created":
        this.agent = data.agent ?? null;
        if (data.forked_from != null) this.forkedAt = item.cursor; // its state copy comes next
        return [];
      case "turn_start":
        this.unsettled.add(data.submission);
        return [];
      case "turn.started":
        if (turn) turn.prompt = data.prompt;
        return [];
      case "attempt.started":
        if (turn) turn.attempts = Math.max(turn.attempts + 1, Number(data.number) || 0);
        return [];
      case "attempt.interrupted":
        if (turn) turn.interruptions += 1;
        return this.#cutPartials((p) => p.turnId === line.turnId);
      case "model.partial":
        return this.#partial(item);
      case "model.completed":
        if (turn) addUsage(turn, data);
        return this.#closePartial(line.turnId, data.round, "recorded");
      case "model.error":
      case "model.fallback": // the failed stream's text is no answer either way
        return this.#closePartial(line.turnId, data.round, "cut");
      case "context.compacted":
        if (turn) addUsage(turn, data);
        return [];
      case "tool.started":
        return this.#toolStarted(item);
      case "tool.step":
        return this.#toolStep(data);
      case "input.requested":
        this.questions.set(item.cursor, { cursor: item.cursor, data, turnId: line.turnId });
        return [];
      case "input.answered":
        return this.#answered(data);
      case "state.changed":
        for (const [key, value] of Object.entries(data.set || {})) this.state[key] = value;
        for (const key of data.deleted || []) delete this.state[key];
        return [];
      case "turn_end":
        return this.#turnEnd(item, turn);
      default:
        if (TOOL_SETTLED.has(line.type)) return this.#toolSettled(item);
        return [];
    }
  }

  #partial(item) {
    const { line } = item;
    const key = `${line.turnId}|${line.data.round}`;
    const open = this.partials.get(key);
    if (open && open.state === "streaming") {
      open.text += line.data.text ?? "";
      item.hidden = true; // a continuation: its text shows in the first piece's item
      item.partialOf = open.cursor;
      return [open.cursor];
    }
    this.partials.set(key, {
      cursor: item.cursor,
      turnId: line.turnId,
      round: line.data.round,
      text: line.data.text ?? "",
      state: "streaming",
    });
    item.partialOf = item.cursor;
    return [];
  }

  #closePartial(turnId, round, state) {
    const key = `${turnId}|${round}`;
    const open = this.partials.get(key);
    if (!open || open.state !== "streaming") return [];
    open.state = state;
    return [open.cursor];
  }

  #cutPartials(match) {
    const changed = [];
    for (const p of this.partials.values()) {
      if (p.state === "streaming" && match(p)) {
        p.state = "cut";
        changed.push(p.cursor);
      }
    }
    return changed;
  }

  #toolStarted(item) {
    const data = item.line.data;
    const earlier = this.tools.get(data.task);
    const changed = earlier ? [earlier.anchor] : [];
    this.tools.set(data.task, {
      task: data.task,
      tool: data.tool,
      policy: data.policy ?? (earlier ? earlier.policy : ""),
      run: data.run ?? 1,
      reason: data.reason ?? null,
      executionId: data.execution_id ?? null,
      turnId: item.line.turnId,
      status: "running",
      result: null,
      progress: null,
      steps: earlier ? earlier.steps : 0,
      anchor: item.cursor,
      earlierRuns: earlier ? [...earlier.earlierRuns, earlier.anchor] : [],
    });
    return changed;
  }

  #toolStep(data) {
    const tool = this.tools.get(data.task);
    if (!tool) return [];
    tool.steps += 1;
    return [tool.anchor];
  }

  #toolSettled(item) {
    const data = item.line.data;
    const status = item.type.slice("tool.".length);
    const tool = this.tools.get(data.task);
    if (!tool) {
      // Settled without a start we saw (a refusal decided before it ran): it anchors here.
      const policy = [...this.tools.values()].find((t) => t.tool === data.tool)?.policy ?? "";
      this.tools.set(data.task, {
        task: data.task,
        tool: data.tool,
        policy,
        run: 0,
        reason: null,
        executionId: null,
        turnId: item.line.turnId,
        status,
        result: data.result ?? null,
        progress: null,
        steps: 0,
        anchor: item.cursor,
        earlierRuns: [],
      });
      return [];
    }
    tool.status = status;
    tool.result = data.result ?? null;
    tool.settledAt = item.cursor;
    return [tool.anchor];
  }

  #answered(data) {
    const q = this.pendingQuestion;
    if (!q) return [];
    q.answer = data;
    return [q.cursor];
  }

  #turnEnd(item, turn) {
    const data = item.line.data;
    this.unsettled.delete(data.submission);
    if (turn) turn.outcome = data.outcome;
    const changed = [];
    for (const q of this.questions.values()) {
      if (!q.answer && !q.closed && q.turnId === item.line.turnId) {
        q.closed = true;
        changed.push(q.cursor);
      }
    }
    return changed.concat(this.#cutPartials((p) => p.turnId === item.line.turnId));
  }
}
