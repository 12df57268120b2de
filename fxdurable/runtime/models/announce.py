"""The first log line of a process that runs agents: which endpoint each provider the agents
use will be called at, which setting chose it, and whether a key is there (never the key).

    model endpoints: openai http://localhost:11434/v1 (from OPENAI_BASE_URL; key from
    OPENAI_API_KEY: missing)

It goes to the ``fxdurable.startup`` logger at INFO, which is set to INFO when nobody has set
its level, so the line is there under the CLI's default WARNING level and Lambda's alike;
``logging.getLogger("fxdurable.startup").setLevel(logging.WARNING)`` silences it.

Importing this module loads no httpx: agents whose models are all scripted never loaded the
HTTP models, and that is found out from ``sys.modules``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable

from fxdurable.runtime.agent import Agent

__all__ = ["announce_model_endpoints", "describe_model_endpoints"]

log = logging.getLogger("fxdurable.startup")


def describe_model_endpoints(agents: Iterable[Agent]) -> str:
    """One line: every distinct provider endpoint of ``agents``, in the agents' order."""
    httpmodel = sys.modules.get("fxdurable.runtime.models.httpmodel")
    said: list[str] = []
    others: list[str] = []
    for agent in agents:
        model = agent.model
        if httpmodel is not None and isinstance(model, httpmodel.HttpModel):
            notes = [
                f"from {model.base_url_source}"
                if model.base_url_source != "default"
                else "default",
                f"key from {model.key_source}: {'set' if model.has_key() else 'missing'}",
                *model.settings_described(),
            ]
            entry = f"{model.prefix} {model.base_url} ({'; '.join(notes)})"
            if entry not in said:
                said.append(entry)
        elif model.name not in others:
            others.append(model.name)
    if not said:
        return f"model endpoints: none (no HTTP provider model: {', '.join(others) or 'no agents'})"
    return "model endpoints: " + "; ".join(said)


def announce_model_endpoints(agents: Iterable[Agent], *, process: str) -> str:
    """Log :func:`describe_model_endpoints` for ``process`` ("fxdurable worker") and return
    the line."""
    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)
    line = f"{process}: {describe_model_endpoints(agents)}"
    log.info("%s", line)
    return line
