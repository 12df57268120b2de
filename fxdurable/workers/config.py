"""A worker's configuration, from the environment (the same in every forked job process).

``FXD_STORE`` (store URL), ``FXD_QUEUE`` (queue URL) and ``FXD_AGENTS`` (``module:attribute``
naming a list of agents, or a function returning one).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from fxdurable.errors import ConfigurationError

__all__ = ["WorkerConfig"]


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
