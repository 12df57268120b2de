"""A worker's configuration, from the environment (the same in every forked job process).

``FXD_STORE`` (store URL), ``FXD_QUEUE`` (queue URL) and ``FXD_AGENTS`` (``module:attribute``
naming a list of agents, or a function returning one); and how much of a job's time a wake may
spend before it hands the turn on (:func:`job_budget`, for RQ jobs and SQS messages alike).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from fxdurable.errors import ConfigurationError
from fxdurable.runtime.budget import InvocationBudget

__all__ = ["WorkerConfig", "job_budget"]


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


def job_budget(timeout_s: float) -> InvocationBudget:
    """Keep a fifth of the job's time (at most 30 s) for the continuation hand-off."""
    return InvocationBudget(timeout_s, margin_s=min(30.0, timeout_s * 0.2))
