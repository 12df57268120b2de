# ruff: noqa: E501  (raw provider streams are kept one event per line, as sent)
"""Raw SSE streams, written from the providers' public descriptions of their stream formats.

OpenAI Chat Completions: ``data: <chat.completion.chunk JSON>`` events, tool-call fragments
keyed by ``index`` (``id``/``name`` in the first fragment only), ``finish_reason`` on the last
choice chunk, then (with ``stream_options.include_usage``) a chunk with ``"choices": []`` and
the ``usage``, then ``data: [DONE]``.

Anthropic Messages: named events ``message_start``, ``content_block_start``/``_delta``/
``_stop`` per block (``text_delta``, ``input_json_delta``), ``ping`` anywhere,
``message_delta`` (stop_reason, cumulative output tokens), ``message_stop``; ``error`` events
may appear after the 200.
"""

from __future__ import annotations

# -- OpenAI ------------------------------------------------------------------------------------

OPENAI_TEXT = """\
data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":", wörld"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"!"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":4,"total_tokens":16}}

data: [DONE]

"""


def first_events(stream: str, n: int) -> str:
    """The first ``n`` events of ``stream`` (events end in a blank line)."""
    return "".join(event + "\n\n" for event in stream.split("\n\n")[:n])


# Two parallel calls, fragments interleaved by index; ids and names only in first fragments;
# the second call's arguments are pretty-printed (newlines and indentation in the string).
OPENAI_PARALLEL_TOOLS = """\
data: {"id":"c2","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_A","type":"function","function":{"name":"get_weather","arguments":""}}]},"finish_reason":null}]}

data: {"id":"c2","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_B","type":"function","function":{"name":"get_time","arguments":""}}]},"finish_reason":null}]}

data: {"id":"c2","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\\"ci"}}]},"finish_reason":null}]}

data: {"id":"c2","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\\n  \\"zone\\""}}]},"finish_reason":null}]}

data: {"id":"c2","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"ty\\": \\"Par"}}]},"finish_reason":null}]}

data: {"id":"c2","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":": \\"UTC\\",\\n  \\"hours\\": [\\n    1,\\n    2\\n  ]\\n}"}}]},"finish_reason":null}]}

data: {"id":"c2","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"is\\"}"}}]},"finish_reason":null}]}

data: {"id":"c2","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}

data: {"id":"c2","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":80,"completion_tokens":30,"total_tokens":110}}

data: [DONE]

"""

OPENAI_ERROR_AFTER_200 = """\
data: {"id":"c3","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Partial"},"finish_reason":null}]}

data: {"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}

"""

OPENAI_ERROR_EVENT_AFTER_200 = """\
data: {"id":"c3","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Partial"},"finish_reason":null}]}

event: error
data: {"error":{"message":"upstream overloaded","type":"overloaded_error"}}

"""

OPENAI_CONTEXT_ERROR_AFTER_200 = """\
data: {"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}

"""

# -- Anthropic ---------------------------------------------------------------------------------

ANTHROPIC_TOOL_USE = """\
event: message_start
data: {"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":472,"output_tokens":2}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Okay, let"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"'s check."}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\\n  \\"city"}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\\": \\"San Fra"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"ncisco\\"\\n}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_02","name":"get_time","input":{}}}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}

event: message_stop
data: {"type":"message_stop"}

"""

ANTHROPIC_TEXT = """\
event: message_start
data: {"type":"message_start","message":{"id":"msg_02","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" there"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":7}}

"""

ANTHROPIC_TEXT_STOP = """\
event: message_stop
data: {"type":"message_stop"}

"""

ANTHROPIC_OVERLOADED_AFTER_200 = """\
event: message_start
data: {"type":"message_start","message":{"id":"msg_03","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","usage":{"input_tokens":10,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}

event: error
data: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}

"""

ANTHROPIC_PROMPT_TOO_LONG_AFTER_200 = """\
event: error
data: {"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}

"""
