// Answering a turn's question (POST /sessions/{id}/answer): the bodies, and the input to
// prefill an edit with.

export class AnswerInputError extends Error {}

/** The input the waiting call was made with, as pretty JSON, from GET .../history's
 * messages: the latest assistant message's call at the question's `index` (or by name). */
export function callArguments(messages, requested) {
  for (let i = messages.length - 1; i >= 0; i -= 1) {
    const calls = messages[i].toolCalls || messages[i].tool_calls || [];
    if (messages[i].role !== "assistant" || calls.length === 0) continue;
    const call =
      calls[requested.index] && calls[requested.index].name === requested.tool
        ? calls[requested.index]
        : calls.find((c) => c.name === requested.tool);
    if (!call) continue;
    let args = call.arguments;
    if (typeof args === "string") {
      try {
        args = JSON.parse(args || "{}");
      } catch {
        return args; // not JSON as the model wrote it: let the person fix it
      }
    }
    return JSON.stringify(args ?? {}, null, 2);
  }
  return "{}";
}

/** The answer's body. `reason` only goes with a deny; a rewrite's input must be a JSON object. */
export function answerBody(kind, { reason = "", inputText = "" } = {}) {
  if (kind === "allow") return { answer: "allow" };
  if (kind === "deny") return reason.trim() ? { answer: "deny", reason: reason.trim() } : { answer: "deny" };
  let input;
  try {
    input = JSON.parse(inputText);
  } catch (error) {
    throw new AnswerInputError(`The input is not valid JSON: ${error.message}`);
  }
  if (input === null || typeof input !== "object" || Array.isArray(input)) {
    throw new AnswerInputError("The input must be a JSON object, like {\"version\": \"1.4\"}.");
  }
  return { answer: "rewrite", input };
}
