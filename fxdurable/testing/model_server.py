"""A scripted model served over HTTP in the providers' wire formats.

The policy that drives :class:`~fxdurable.runtime.models.scripted.ScriptedModel` in process
drives this server unchanged: each provider request is read back into a
:class:`ModelRequest`, the policy answers it, and the answer is streamed as OpenAI Chat
Completions (``POST /v1/chat/completions``) or Anthropic Messages (``POST /v1/messages``)
server-sent events, with the :class:`Quirks` real models and gateways show::

    with ScriptedModelServer(policy, quirks=Quirks(pretty_arguments=True)) as server:
        ...  # point an OpenAI client at server.openai_base_url, an Anthropic one at
        ...  # server.anthropic_base_url, and run the agent
        assert server.model_requests[0].messages[0].text == "Ship release 1.4."

Stdlib only: a :class:`ThreadingHTTPServer` on 127.0.0.1 (a free port) in a background
thread, HTTP/1.1 with chunked transfer encoding (``model_server_http``), so a streaming client
sees every chunk as it is written and a response held open has really not ended.
``python -m fxdurable.testing.model_server`` runs one standalone, for trying a client by hand:
with an echo policy, or with ``--policy package.module:attribute`` (any policy callable, e.g.
``examples.coding_agent.policy:coding_policy``, imported from the current directory first as
``--agents`` is), and ``--request-log PATH`` to see what reached it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from fxdurable.errors import ConfigurationError
from fxdurable.runtime.agent_spec import import_app_module
from fxdurable.runtime.models.base import ModelRequest, ModelResponse
from fxdurable.runtime.models.scripted import Policy, reply, turn_messages
from fxdurable.runtime.models.scripted import _from_list as _list_policy
from fxdurable.testing.model_server_http import (
    JsonReply,
    ModelHTTPServer,
    Reply,
    Stall,
    StreamReply,
)
from fxdurable.testing.prompt_cache_sim import PromptCacheSim
from fxdurable.testing.wire_anthropic import AnthropicWire
from fxdurable.testing.wire_common import (
    ERROR_STATUS,
    ErrorKind,
    Failure,
    Quirks,
    Wire,
    WireError,
    as_streamed,
    context_chars,
)
from fxdurable.testing.wire_openai import OpenAIWire
from fxdurable.testing.wire_openai_responses import OpenAIResponsesWire

__all__ = [
    "Failure",
    "PolicyImportError",
    "Quirks",
    "RecordedRequest",
    "ScriptedModelServer",
    "load_policy",
    "main",
]

logger = logging.getLogger(__name__)

WIRES: dict[str, Wire] = {w.path: w for w in (OpenAIWire(), AnthropicWire(), OpenAIResponsesWire())}
REDACTED = "[REDACTED]"
_SECRET_HEADERS = {"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie"}
_SECRET_WORDS = ("key", "token", "secret")


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordedRequest:
    """One request as the server saw it, for assertions.

    ``headers`` are lower-cased, with credentials replaced by ``"[REDACTED]"``; ``body`` is the
    JSON body (None when it was not JSON); ``request`` is it read back (None when unreadable);
    ``status`` is what was answered (0 for a stall); ``response`` is the policy's answer as
    streamed: with the tool-call ids sent and the usage reported; ``raw`` the body's bytes.
    """

    wire: str | None  # "openai" | "anthropic" | None (an unknown path)
    path: str
    headers: dict[str, str]
    body: Any
    request: ModelRequest | None
    status: int
    response: ModelResponse | None = None
    failure: Failure | None = None
    error: str | None = None
    raw: bytes = b""  # the body's bytes exactly as sent (what a prompt cache compares)


class ScriptedModelServer:
    """Serves ``policy`` (or a list of responses, one per model call in a turn, exactly as
    :class:`ScriptedModel` takes them) as OpenAI and Anthropic streams.

    Each POST is checked in this order: a known path (else 404), the API key when
    ``require_api_key`` is set (401), a readable streaming body (400), then the next of
    ``fail_first`` if any is left, then ``context_limit_chars`` (the provider's 400), then the
    policy answers. Every POST is recorded in :attr:`requests`, whatever was answered.

    Thread-safe; the policy is called under a lock, one request at a time. ``quirks`` may be
    replaced between requests; replacing it re-arms ``fail_first``.
    """

    def __init__(
        self,
        policy: Policy | Sequence[ModelResponse],
        *,
        quirks: Quirks | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        request_log: Path | None = None,
        log_bodies: bool = True,
    ) -> None:
        self._policy = policy if callable(policy) else _list_policy(list(policy))
        self._address = (host, port)
        self._lock = threading.Lock()
        self._policy_lock = threading.Lock()
        self._quirks = quirks or Quirks()
        self._failures: deque[Failure] = deque(self._quirks.fail_first)
        self._httpd: ModelHTTPServer | None = None
        self.requests: list[RecordedRequest] = []
        self._cache = PromptCacheSim()
        # Each POST, appended as one JSON line before it is answered: what a process that is
        # then SIGKILLed sent survives it (its ``requests`` do not). Its path, the model it
        # names and how many messages it holds; its body as sent (``raw``) unless
        # ``log_bodies`` is False. Never a header: credentials travel in those.
        self._request_log = request_log
        self._log_bodies = log_bodies

    # -- configuration ---------------------------------------------------------------------

    @property
    def quirks(self) -> Quirks:
        return self._quirks

    @quirks.setter
    def quirks(self, quirks: Quirks) -> None:
        with self._lock:
            self._quirks = quirks
            self._failures = deque(quirks.fail_first)

    @property
    def model_requests(self) -> list[ModelRequest]:
        """The requests read back, like :attr:`ScriptedModel.requests`."""
        return [r.request for r in self.requests if r.request is not None]

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``: the base URL for Anthropic clients."""
        if self._httpd is None:
            raise RuntimeError("the model server is not running: call start() first")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> ScriptedModelServer:
        if self._httpd is not None:
            raise RuntimeError("the model server is already running")
        if self._request_log is not None:  # e.g. .fxd-coding/, before make coding-ui made it
            self._request_log.parent.mkdir(parents=True, exist_ok=True)
        self._httpd = ModelHTTPServer(self._address, self._respond)
        return self

    def stop(self) -> None:
        """Stop serving and cut every open connection (held-open ones included). Prompt."""
        if self._httpd is not None:
            self._httpd.close()
            self._httpd = None

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _log_request(self, path: str, body: Any, raw: bytes) -> None:
        assert self._request_log is not None
        fields = body if isinstance(body, dict) else {}
        # Chat Completions and Messages send "messages"; the Responses API sends "input".
        messages = fields.get("messages", fields.get("input"))
        entry: dict[str, Any] = {
            "pid": os.getpid(),
            "path": path,
            "model": fields.get("model"),
            "messages": len(messages) if isinstance(messages, list) else None,
        }
        if self._log_bodies:
            entry["raw"] = raw.decode(errors="replace")
        with self._lock, self._request_log.open("a") as log:
            log.write(json.dumps(entry) + "\n")

    # -- deciding what to answer (no I/O; called from the handler threads) -----------------

    def _respond(self, method: str, target: str, headers: dict[str, str], raw: bytes) -> Reply:
        if method != "POST":
            return _not_found(method, target)
        quirks = self.quirks
        path = urlsplit(target).path.rstrip("/")
        wire = WIRES.get(path)
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = None
        if self._request_log is not None:
            self._log_request(path, body, raw)

        def record(status: int, request: ModelRequest | None = None, **fields: Any) -> None:
            entry = RecordedRequest(
                wire=wire.name if wire else None,
                path=path,
                headers=_redacted(headers),
                body=body,
                request=request,
                status=status,
                raw=raw,
                **fields,
            )
            with self._lock:
                self.requests.append(entry)

        if wire is None:
            record(404)
            return _not_found(method, target)
        if quirks.require_api_key is not None and not wire.authorized(
            headers, quirks.require_api_key
        ):
            record(401)
            return _error(wire, "auth")
        try:
            if not isinstance(body, dict):
                raise WireError("the body must be a JSON object")
            request = wire.parse(body)
            if body.get("stream") is not True:
                raise WireError("this scripted server only streams: send stream=true")
            refused = wire.follow_up_error(body, quirks)
            if refused is not None:
                raise WireError(refused)
        except WireError as e:
            record(400, error=str(e))
            return _error(wire, "bad_request", str(e))
        with self._lock:
            failure = self._failures.popleft() if self._failures else None
        if failure is not None and not failure.mid_stream:
            record(failure.status, request=request, failure=failure)
            if failure.kind == "stall":
                return Stall(failure.stall_s)
            return _error(wire, failure.kind, retry_after=failure.retry_after)
        limit = quirks.context_limit_chars
        if limit is not None and (size := context_chars(request)) > limit:
            record(400, request=request)
            return JsonReply(400, wire.context_error(size, limit))
        try:
            with self._policy_lock:
                response = self._policy(request)
        except Exception as e:
            logger.exception("the scripted policy raised")
            message = f"the scripted policy raised {type(e).__name__}: {e}"
            record(500, request=request, error=message)
            return _error(wire, "policy", message)
        response = as_streamed(request, response, wire.id_prefix)
        if quirks.prompt_cache:
            usage = self._cache.usage(wire.name, body, response.usage)
            response = replace(response, usage=usage)
        plan = wire.stream(response, body=body, quirks=quirks)
        record(200, request=request, response=response, failure=failure)
        if failure is None:
            return StreamReply(plan.head + plan.tail, quirks, quirks.hold_open_after_finish_s)
        cut = plan.head[: max(1, len(plan.head) // 2)]  # mid-stream: before the finish
        if failure.kind == "disconnect":
            return StreamReply(cut, quirks, ending="cut")
        return StreamReply([*cut, wire.stream_error()], quirks)


def _error(
    wire: Wire, kind: ErrorKind, detail: str = "", *, retry_after: str | None = None
) -> Reply:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return JsonReply(ERROR_STATUS[kind], wire.error(kind, detail), headers)


def _not_found(method: str, target: str) -> Reply:
    message = f"no route {method} {target}: POST {' or '.join(WIRES)}"
    return JsonReply(404, {"error": {"message": message, "type": "not_found_error"}})


def _redacted(headers: dict[str, str]) -> dict[str, str]:
    return {
        name: REDACTED
        if name in _SECRET_HEADERS or any(w in name for w in _SECRET_WORDS)
        else value
        for name, value in headers.items()
    }


def echo_policy(request: ModelRequest) -> ModelResponse:
    """Answers the last user message with itself: the standalone server's policy."""
    users = [m for m in turn_messages(request) if m.role == "user"]
    return reply(f"echo: {users[-1].text}" if users else "echo: (nothing said)")


class PolicyImportError(ConfigurationError):
    """``--policy`` names no callable: the module or the attribute is not there, or what it
    names cannot be called with a request."""


def load_policy(spec: str) -> Policy:
    """The policy ``spec`` (``package.module:attribute``) names, imported with the current
    directory first on ``sys.path`` (as ``--agents`` imports agents)."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise PolicyImportError(f"--policy must look like 'package.module:attribute', not {spec!r}")
    try:
        module = import_app_module(module_name, named_by=f"--policy {spec}")
    except ConfigurationError as exc:
        raise PolicyImportError(str(exc)) from exc
    policy = getattr(module, attribute, None)
    if policy is None:
        raise PolicyImportError(f"--policy {spec}: {module_name!r} has no attribute {attribute!r}")
    if not callable(policy):
        raise PolicyImportError(
            f"--policy {spec} is not callable (its type is {type(policy).__name__}): a policy "
            "takes a ModelRequest and returns a ModelResponse"
        )
    chosen: Policy = policy
    return chosen


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m fxdurable.testing.model_server",
        description="Serve a scripted policy (an echo by default) as OpenAI and Anthropic "
        "streams, for manual tests.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument(
        "--policy",
        default=None,
        metavar="MODULE:ATTR",
        help="the policy to serve, e.g. examples.coding_agent.policy:coding_policy "
        "(imported from the current directory first); default: echo the last user message",
    )
    parser.add_argument(
        "--request-log",
        type=Path,
        default=None,
        metavar="PATH",
        help="append one JSON line per request received (path, model, message count; never "
        "a header)",
    )
    parser.add_argument("--pretty-arguments", action="store_true")
    parser.add_argument("--chunk-bytes", type=int, default=0)
    parser.add_argument("--hold-open", type=float, default=0.0, metavar="SECONDS")
    parser.add_argument("--require-api-key", default=None, metavar="KEY")
    args = parser.parse_args(argv)
    try:
        policy = echo_policy if args.policy is None else load_policy(args.policy)
    except PolicyImportError as exc:
        parser.error(str(exc))
    quirks = Quirks(
        pretty_arguments=args.pretty_arguments,
        chunk_bytes=args.chunk_bytes,
        hold_open_after_finish_s=args.hold_open,
        require_api_key=args.require_api_key,
    )
    server = ScriptedModelServer(
        policy,
        quirks=quirks,
        host=args.host,
        port=args.port,
        request_log=args.request_log,
        log_bodies=False,
    )
    # Ctrl-C at any moment after start (even while the addresses print) stops it cleanly.
    with contextlib.suppress(KeyboardInterrupt), server as s:
        print(f"OpenAI:    {s.openai_base_url}/chat/completions", flush=True)
        print(f"Anthropic: {s.anthropic_base_url}/v1/messages", flush=True)
        print(f"Policy:    {args.policy or 'echo'}", flush=True)
        if args.request_log is not None:
            print(f"Requests:  logged to {args.request_log}", flush=True)
        while True:  # a timed wait, so a signal is handled promptly on every platform
            threading.Event().wait(0.5)


if __name__ == "__main__":
    main()
