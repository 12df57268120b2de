"""Who is calling: ``authenticate(request) -> principal | None``.

A principal is a stable user id (a string). Sessions record the principal that created them
and answer 404 to anyone else. The default is :class:`BearerTokens`, a fixed set of tokens
from configuration; a real identity provider plugs in as any async callable with the same
signature, e.g. one that verifies a JWT and returns its ``sub`` claim (see the README).
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from starlette.requests import Request

from fxdurable.errors import ConfigurationError

__all__ = ["Authenticate", "BearerTokens", "dev_principal", "tokens_from_env"]

Authenticate = Callable[[Request], Awaitable[str | None]]

DEV_PRINCIPAL = "dev"


class BearerTokens:
    """``Authorization: Bearer <token>`` checked against ``{token: principal}``.

    Every token is compared in constant time, so timing does not reveal a prefix.
    """

    def __init__(self, principals_by_token: Mapping[str, str]) -> None:
        if not principals_by_token:
            raise ConfigurationError("BearerTokens needs at least one token")
        for token, principal in principals_by_token.items():
            if len(token) < 16:
                raise ConfigurationError(
                    f"the token for {principal!r} is shorter than 16 characters; "
                    "use a long random one, e.g. `python -c 'import secrets; "
                    "print(secrets.token_urlsafe(32))'`"
                )
        self._tokens = [(t.encode(), p) for t, p in principals_by_token.items()]

    async def __call__(self, request: Request) -> str | None:
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            return None
        candidate = given.strip().encode()
        found = None
        for token, principal in self._tokens:
            if hmac.compare_digest(token, candidate):
                found = principal
        return found


async def dev_principal(request: Request) -> str | None:
    """``--dev``: everyone is the same principal, no credentials asked. Never in production."""
    return DEV_PRINCIPAL


def parse_tokens(text: str, *, source: str) -> dict[str, str]:
    """``principal=token`` entries, separated by commas or newlines; ``#`` starts a comment."""
    tokens: dict[str, str] = {}
    for raw in text.replace(",", "\n").splitlines():
        entry = raw.split("#", 1)[0].strip()
        if not entry:
            continue
        principal, sep, token = entry.partition("=")
        if not sep or not principal.strip() or not token.strip():
            raise ConfigurationError(
                f"{source}: expected 'principal=token' entries, got {entry.split('=')[0]!r}=..."
            )
        if token.strip() in tokens:
            raise ConfigurationError(f"{source}: the same token is given to two principals")
        tokens[token.strip()] = principal.strip()
    return tokens


def tokens_from_env(tokens_file: str | None = None) -> dict[str, str]:
    """Tokens from ``--tokens-file`` / ``$FXD_HTTP_TOKENS_FILE``, else ``$FXD_HTTP_TOKENS``."""
    path = tokens_file or os.environ.get("FXD_HTTP_TOKENS_FILE")
    if path:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ConfigurationError(f"cannot read the tokens file {path}: {exc}") from exc
        return parse_tokens(text, source=path)
    return parse_tokens(os.environ.get("FXD_HTTP_TOKENS", ""), source="FXD_HTTP_TOKENS")
