"""A worker's configuration, from the environment (the same in every forked job process).

``FXD_STORE`` (store URL), ``FXD_QUEUE`` (queue URL) and ``FXD_AGENTS`` (``module:attribute``
naming a list of agents, or a function returning one).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from dataclasses import dataclass

from fxdurable.errors import ConfigurationError
from fxdurable.runtime.agent import Agent

__all__ = ["WorkerConfig", "load_agents"]


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


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    store_url: str
    queue_url: str
    agents_spec: str

    @classmethod
    def from_env(cls) -> WorkerConfig:
        missing = [k for k in ("FXD_STORE", "FXD_QUEUE", "FXD_AGENTS") if not os.environ.get(k)]
        if missing:
            raise ConfigurationError(f"a worker needs {', '.join(missing)} in its environment")
        return cls(os.environ["FXD_STORE"], os.environ["FXD_QUEUE"], os.environ["FXD_AGENTS"])

    def export(self) -> None:
        """Put this configuration in the environment, for forked job processes."""
        os.environ["FXD_STORE"] = self.store_url
        os.environ["FXD_QUEUE"] = self.queue_url
        os.environ["FXD_AGENTS"] = self.agents_spec
