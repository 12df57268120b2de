"""Agents named by configuration: ``package.module:attribute`` (``FXD_AGENTS``, ``--agents``).

Every process that runs or serves agents from configuration (an RQ worker and each of its
jobs, ``fxdurable serve``, the deployable HTTP handler) loads them with the same rules.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from fxdurable.errors import ConfigurationError
from fxdurable.runtime.agent import Agent

__all__ = ["load_agents"]


def load_agents(spec: str) -> list[Agent]:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigurationError(f"FXD_AGENTS must look like 'package.module:agents', not {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"cannot import {module_name!r} named by FXD_AGENTS: {exc}"
        ) from exc
    try:
        value = getattr(module, attribute)
    except AttributeError as exc:
        raise ConfigurationError(f"{module_name!r} has no attribute {attribute!r}") from exc
    if callable(value) and not isinstance(value, Agent):
        value = value()
    agents: Sequence[object] = [value] if isinstance(value, Agent) else value
    if not agents or not all(isinstance(a, Agent) for a in agents):
        raise ConfigurationError(f"{spec!r} must name an Agent or a list of Agents")
    return [a for a in agents if isinstance(a, Agent)]
