"""Prompt caching: what each provider is asked to cache, and the off switch (docs/caching.md).

Anthropic caches only up to the ``cache_control`` breakpoints a request marks (at most 4): a
request marks the tools (the last definition), the system prompt, and the latest message (its
last block that may carry one), so each step of a turn reads what the step before wrote, up
to the newest message, and writes the rest. Breakpoints on older messages would move as the
conversation grows and change the bytes a previous request cached; one moving breakpoint on
the newest message does not (the API looks back from it for the longest cached prefix).

OpenAI caches prompt prefixes on its own; ``prompt_cache_key`` routes requests with the same
key to the same cache, so each session sends a key derived from its id (hashed: the id is the
application's and may name a user).

Both depend on the request's bytes: they are built from the journal the same way in every
process (keys in a fixed order, the conversation last, provider parts with sorted keys), so a
turn recovered after a crash sends the prefix its dead attempt sent and reads its cache.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from fxdurable.errors import ConfigurationError
from fxdurable.runtime.models.endpoint import env_value

__all__ = ["PROMPT_CACHE_ENV", "PromptCache", "mark_anthropic_body", "session_cache_key"]

PROMPT_CACHE_ENV = "FXD_PROMPT_CACHE"  # "off": models built without prompt_cache= cache nothing
_OFF_WORDS = frozenset({"off", "0", "false", "no"})
# Blocks the Messages API refuses a cache_control on: a breakpoint goes on an earlier block.
_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})
MAX_BREAKPOINTS = 4  # the Messages API's limit per request


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptCache:
    """What a model asks its provider to cache. ``tools``, ``system`` and ``latest_message``
    are Anthropic's breakpoints (``ttl`` their lifetime: ``"5m"``, the API's default, or
    ``"1h"``, whose writes cost more); ``session_key`` sends OpenAI's ``prompt_cache_key``
    per session. :meth:`off` caches nothing."""

    tools: bool = True
    system: bool = True
    latest_message: bool = True
    ttl: Literal["5m", "1h"] = "5m"
    session_key: bool = True

    def __post_init__(self) -> None:
        if self.ttl not in ("5m", "1h"):
            raise ConfigurationError(f"PromptCache ttl is '5m' or '1h', not {self.ttl!r}")

    @classmethod
    def off(cls) -> PromptCache:
        return cls(tools=False, system=False, latest_message=False, session_key=False)

    @classmethod
    def resolve(cls, given: PromptCache | bool | None) -> PromptCache:
        """A model's setting: ``True``/``False`` switch everything on/off; ``None`` (not
        given) is on unless ``$FXD_PROMPT_CACHE`` says off."""
        if isinstance(given, PromptCache):
            return given
        if given is None:
            value = env_value(PROMPT_CACHE_ENV)
            given = value is None or value.strip().lower() not in _OFF_WORDS
        return cls() if given else cls.off()

    def control(self) -> dict[str, Any]:
        """The ``cache_control`` object a breakpoint carries."""
        return {"type": "ephemeral"} if self.ttl == "5m" else {"type": "ephemeral", "ttl": "1h"}


def session_cache_key(session_id: str | None, cache: PromptCache) -> str | None:
    """The ``prompt_cache_key`` of a session's requests; None when there is none to send."""
    if session_id is None or not cache.session_key:
        return None
    return "fxd-" + hashlib.sha256(session_id.encode()).hexdigest()[:32]


def mark_anthropic_body(body: dict[str, Any], cache: PromptCache) -> None:
    """Put ``cache``'s breakpoints on a Messages body, in place (marked blocks are copies:
    the recorded parts they came from are never changed)."""
    control = cache.control()
    if cache.tools and body.get("tools"):
        tools = body["tools"]
        tools[-1] = {**tools[-1], "cache_control": control}
    if cache.system and isinstance(body.get("system"), str):
        body["system"] = [{"type": "text", "text": body["system"], "cache_control": control}]
    if cache.latest_message and body.get("messages"):
        latest = body["messages"][-1]
        content = latest["content"]
        index = _last_markable(content)
        if index is not None:
            content = list(content)
            content[index] = {**content[index], "cache_control": control}
            body["messages"][-1] = {**latest, "content": content}
    assert _breakpoints(body) <= MAX_BREAKPOINTS


def _last_markable(content: Any) -> int | None:
    if not isinstance(content, list):
        return None
    for index in range(len(content) - 1, -1, -1):
        block = content[index]
        if isinstance(block, dict) and block.get("type") not in _UNMARKABLE:
            return index
    return None


def _breakpoints(body: dict[str, Any]) -> int:
    def marked(blocks: Iterable[Any]) -> int:
        return sum(1 for b in blocks if isinstance(b, dict) and "cache_control" in b)

    system = body.get("system")
    count = marked(body.get("tools") or ()) + (marked(system) if isinstance(system, list) else 0)
    for message in body.get("messages") or ():
        content = message.get("content")
        if isinstance(content, list):
            count += marked(content)
    return count
