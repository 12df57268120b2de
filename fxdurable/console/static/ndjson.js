// Newline-delimited JSON from a fetch Response, read as it arrives (ReadableStream).

/** Splits text chunks into complete lines; keeps the unfinished tail for the next chunk. */
export class LineSplitter {
  constructor() {
    this.tail = "";
  }

  push(chunk) {
    const parts = (this.tail + chunk).split("\n");
    this.tail = parts.pop();
    return parts.filter((p) => p.trim() !== "");
  }

  /** What is left once the body ended: a last line without its newline. */
  end() {
    const rest = this.tail.trim();
    this.tail = "";
    return rest ? [rest] : [];
  }
}

/** A JSON line that does not parse: the stream is corrupt, so the reader treats it as a
 * network error (and reconnects from the last good cursor). */
export class BadLineError extends Error {}

function parse(text) {
  try {
    return JSON.parse(text);
  } catch {
    throw new BadLineError(`not a JSON line: ${text.slice(0, 80)}`);
  }
}

/** Calls `onLine` with each parsed line of `response`'s body, in order; resolves when the
 * body ends, rejects on a network error mid-body. Returns how many lines there were. */
export async function readLines(response, onLine) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  const splitter = new LineSplitter();
  let count = 0;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      for (const text of splitter.push(decoder.decode(value, { stream: true }))) {
        onLine(parse(text));
        count += 1;
      }
    }
    for (const text of splitter.push(decoder.decode()).concat(splitter.end())) {
      onLine(parse(text));
      count += 1;
    }
  } catch (error) {
    reader.cancel().catch(() => {}); // stop the transfer; the caller reconnects
    throw error;
  }
  return count;
}
