// Follows a session's stream: GET /chat from the last cursor, again and again.
//
// Each response is read line by line; when it ends (the server's `stream_end`, a long poll's
// answer in Lambda's receipt mode, or a dropped connection) the next request starts from the
// last cursor this follower saw, so its lines have no gap; the timeline drops any line it
// holds already, so there is no duplicate either. A 404 means the session does not exist yet
// (a new session before its first prompt): the follower waits for `kick()`.

import { readLines } from "./ndjson.js";

export const STATUS = Object.freeze({ LIVE: "live", RECONNECTING: "reconnecting", IDLE: "idle" });

const defaultSleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export function backoffMs(failures, maxMs = 2000) {
  return Math.min(maxMs, 250 * 2 ** Math.max(0, failures - 1));
}

export class Follower {
  /**
   * open(cursor, signal) -> Promise<Response>: the GET /chat request (rejects with an error
   * whose `status` is the HTTP status, or a network error). onLine(line) gets every line;
   * onStatus(status, error) hears "live" | "reconnecting" | "idle".
   */
  constructor({ open, onLine, onStatus = () => {}, sleep = defaultSleep, maxDelayMs = 2000 }) {
    this.open = open;
    this.onLine = onLine;
    this.onStatus = onStatus;
    this.sleep = sleep;
    this.maxDelayMs = maxDelayMs;
    this.cursor = 0;
    this.status = STATUS.IDLE;
    this.stopped = true;
    this.failures = 0;
    this.connects = 0; // requests made: the tests count reconnects with it
    this.#kicked = null;
  }

  #kicked;
  #controller = null;
  #done = null;

  start(cursor = 0) {
    this.cursor = cursor;
    this.stopped = false;
    this.#controller = new AbortController();
    this.#done = this.#loop();
    return this.#done;
  }

  /** Stops following; resolves once the loop has ended. */
  stop() {
    this.stopped = true;
    this.#controller?.abort();
    this.kick();
    return this.#done;
  }

  /** Wakes a follower that waits (for a session to exist, or before a retry). */
  kick() {
    const kicked = this.#kicked;
    this.#kicked = null;
    kicked?.();
  }

  #waitForKick(ms) {
    const kicked = new Promise((resolve) => {
      this.#kicked = resolve;
    });
    return ms === undefined ? kicked : Promise.race([kicked, this.sleep(ms)]);
  }

  #setStatus(status, error = null) {
    if (status === this.status && !error) return;
    this.status = status;
    this.onStatus(status, error);
  }

  #accept(line) {
    if (line && typeof line.cursor === "number" && line.cursor > this.cursor) this.cursor = line.cursor;
    this.onLine(line);
  }

  async #loop() {
    while (!this.stopped) {
      try {
        this.connects += 1;
        const response = await this.open(this.cursor, this.#controller.signal);
        this.#setStatus(STATUS.LIVE);
        this.failures = 0;
        const lines = await readLines(response, (line) => this.#accept(line));
        if (lines === 0 && !this.stopped) await this.#waitForKick(this.maxDelayMs); // no spin
      } catch (error) {
        if (this.stopped) break;
        if (error && error.status === 404) {
          this.#setStatus(STATUS.IDLE);
          await this.#waitForKick();
          continue;
        }
        this.failures += 1;
        this.#setStatus(STATUS.RECONNECTING, error);
        await this.#waitForKick(backoffMs(this.failures, this.maxDelayMs));
      }
    }
    this.#setStatus(STATUS.IDLE);
  }
}
