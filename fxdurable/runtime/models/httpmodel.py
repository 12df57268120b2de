"""The shared shape of a streaming HTTP model: the base class owns :meth:`HttpModel.stream`,
each provider fills in the request (URL, headers, body) and a parser of its events.

The stream's end is decided by the parser, never by the connection: once the parser has seen
the finish, at most ``finish_grace_s`` more is spent on what may follow (usage, the final
event), and then exactly one :class:`Finish` is yielded after the response has been closed.
The provider's terminal event ends the wait at once, even without its blank line; a stream
that ends cleanly without any finish is complete if its content is (the parser infers it).
"""

from __future__ import annotations

import asyncio
import json
import os
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping
from typing import Any, ClassVar, Protocol

import httpx

from fxdurable.errors import ConfigurationError, ModelError
from fxdurable.runtime.models.base import Finish, ModelRequest, ModelResponse, StreamPart, TextDelta
from fxdurable.runtime.models.endpoint import BaseUrl, endpoint_label
from fxdurable.runtime.models.http import Timeouts, display_url, open_event_stream
from fxdurable.runtime.models.sse import SSEEvent

__all__ = ["HttpModel", "StreamParser"]


class StreamParser(Protocol):
    """Reads one response's events. ``feed`` raises the provider's mid-stream errors."""

    @property
    def finished(self) -> bool:
        """The response is complete (what may still follow is usage or the closing event)."""
        ...

    @property
    def complete(self) -> bool:
        """Nothing more is worth waiting for."""
        ...

    def feed(self, event: SSEEvent) -> str:
        """Take an event before the finish; returns the text it adds (maybe empty)."""
        ...

    def feed_after_finish(self, event: SSEEvent) -> None:
        """Take an event that came after the finish. Raises only for an error the provider
        sent there: a response followed by an error is a failed call, not a success."""
        ...

    def is_last(self, event: SSEEvent) -> bool:
        """``event`` is the provider's terminal event (``[DONE]``, ``message_stop``)."""
        ...

    def end_of_stream(self) -> None:
        """The stream ended cleanly before the finish: infer it from a whole-looking content
        (the parser is then ``finished``) or raise :class:`ModelRetryableError`."""
        ...

    def response(self) -> ModelResponse: ...


class _Secret:
    """Holds an API key; shows as ``***`` in reprs, ``vars()`` and tracebacks' locals."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "***"


class HttpModel(ABC):
    """A model behind a streaming HTTP API. Subclasses set the class variables and implement
    :meth:`_url`, :meth:`_headers`, :meth:`_body` and :meth:`_parser`."""

    prefix: ClassVar[str]  # "openai": the model-string prefix and the name's
    provider: ClassVar[str]  # "OpenAI": how messages name it on its own endpoint
    key_env: ClassVar[str]
    # Read in this order; the first one set wins (fxdurable's own name, then the SDK's).
    base_url_envs: ClassVar[tuple[str, ...]]
    default_base_url: ClassVar[str]
    # The body field that carries the conversation: it stays last, after any ``extra_body``
    # field, so the steps of a turn share a byte prefix (docs/caching.md).
    conversation_field: ClassVar[str]
    # Fields fxdurable writes itself and ``extra_body`` may not replace.
    owned_fields: ClassVar[frozenset[str]]

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None,
        api_key: str | None,
        timeout: Timeouts | float | None,
        finish_grace_s: float,
        transport: httpx.AsyncBaseTransport | None,
        extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        if not model:
            raise ConfigurationError(f"{type(self).__name__} needs a model name")
        if finish_grace_s < 0:
            raise ConfigurationError("finish_grace_s must not be negative")
        self._model = model
        endpoint = BaseUrl.resolve(base_url, self.base_url_envs, self.default_base_url)
        self._base_url = endpoint.url
        self._base_url_source = endpoint.source
        # Errors name the endpoint's host when it is not the provider's own (Groq, Ollama).
        self._label = endpoint_label(
            endpoint.url, default_url=self.default_base_url, provider=self.provider
        )
        # An explicit key is held; otherwise the environment is read at each call, so the
        # object never holds a key it was not given.
        self._api_key = _Secret(api_key) if api_key is not None else None
        if timeout is None:
            timeout = Timeouts()
        elif not isinstance(timeout, Timeouts):
            timeout = Timeouts(total=float(timeout))
        self._timeouts = timeout
        self._finish_grace_s = finish_grace_s
        self._transport = transport
        self._extra_body = self._checked_extra_body(extra_body)

    @property
    def name(self) -> str:
        return f"{self.prefix}/{self._model}"

    @property
    def model(self) -> str:
        return self._model

    @property
    def base_url(self) -> str:
        return display_url(self._base_url)

    @property
    def base_url_source(self) -> str:
        """What set :attr:`base_url`: ``"base_url="``, an environment variable's name, or
        ``"default"``."""
        return self._base_url_source

    @property
    def key_source(self) -> str:
        """Where the API key comes from: ``"api_key="`` or :attr:`key_env`."""
        return "api_key=" if self._api_key is not None else self.key_env

    def has_key(self) -> bool:
        """A key is given or set in :attr:`key_env` now (it is read again at each call)."""
        if self._api_key is not None:
            return bool(self._api_key.reveal())
        return bool(os.environ.get(self.key_env))

    def settings_described(self) -> list[str]:
        """Other settings worth a word in a worker's first log line (never their values,
        which may be secret): the ``extra_body`` fields by name."""
        if not self._extra_body:
            return []
        return [f"extra_body: {', '.join(self._extra_body)}"]

    def _checked_extra_body(self, extra: Mapping[str, Any] | None) -> dict[str, Any]:
        """``extra_body`` as it is sent: JSON, and none of the fields fxdurable writes."""
        if not extra:
            return {}
        taken = sorted(set(extra) & (self.owned_fields | {self.conversation_field}))
        if taken:
            raise ConfigurationError(
                f"extra_body may not set {', '.join(taken)}: fxdurable writes "
                f"{'it' if len(taken) == 1 else 'them'} from the agent and the journal"
            )
        try:
            # Round-tripped: a later change to the caller's dict does not reach the requests,
            # and what cannot be sent is refused now, not at the first model call.
            return dict(json.loads(json.dumps(dict(extra))))
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"extra_body must be JSON: {exc}") from None

    def _request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The provider's body with the ``extra_body`` fields, which go before the
        conversation: what a turn's steps share stays a prefix of the bytes."""
        body = self._body(request)
        if not self._extra_body:
            return body
        conversation = body.pop(self.conversation_field, None)
        body.update(self._extra_body)
        if conversation is not None:
            body[self.conversation_field] = conversation
        return body

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self._model!r}, base_url={self.base_url!r})"

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamPart]:
        """Text deltas, then one :class:`Finish`. Raises ``ModelRetryableError`` (429, 5xx,
        overloaded, timeouts, broken connections, a stream cut, a transient error event before
        or after the finish), ``ContextLengthError``, or ``ModelError`` (other 4xx, permanent
        error events, malformed events)."""
        key = self._key()
        parser = self._parser(key)
        async with open_event_stream(
            provider=self._label,
            url=self._url(),
            headers=self._headers(key),
            body=self._request_body(request),
            timeouts=self._timeouts,
            transport=self._transport,
            secret=key,
            key_env=self.key_env,
            is_last=parser.is_last,
        ) as events:
            while not parser.finished:
                event = await events.next()
                if event is None:
                    parser.end_of_stream()
                    break
                text = parser.feed(event)
                if text:
                    yield TextDelta(text)
            loop = asyncio.get_running_loop()
            grace_end = loop.time() + self._finish_grace_s
            while not parser.complete:
                remaining = grace_end - loop.time()
                if remaining <= 0:
                    break
                event = await events.next_within(remaining)
                if event is None:
                    break
                parser.feed_after_finish(event)
        # The response is closed before the finish is handed over: nothing is left open
        # for the consumer to forget.
        yield Finish(parser.response())

    def _key(self) -> str | None:
        if self._api_key is not None:
            key = self._api_key.reveal() or None
        else:
            key = os.environ.get(self.key_env) or None
        if key is not None and (key != key.strip() or not key.isascii() or not key.isprintable()):
            # A key read from a mounted secret often ends in a newline; a header cannot carry
            # it, and the HTTP library's error would quote it. Refuse it without showing it.
            raise ModelError(
                f"the {self.provider} API key ({self.key_env} or api_key=) has surrounding "
                "whitespace or characters an HTTP header cannot carry; fix the key (it is not "
                "shown here)"
            )
        return key

    # -- what a provider fills in -------------------------------------------------------------

    @abstractmethod
    def _url(self) -> str: ...

    @abstractmethod
    def _headers(self, key: str | None) -> Mapping[str, str]: ...

    @abstractmethod
    def _body(self, request: ModelRequest) -> dict[str, Any]: ...

    @abstractmethod
    def _parser(self, key: str | None) -> StreamParser: ...
