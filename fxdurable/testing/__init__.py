"""Test support shipped with the package: the crash-invariant checker (users audit their own
stores with it, and ``fxdurable check`` runs it) and the blob audit (``check --blobs``), a
hand-moved clock, and the scripted model
served over HTTP in the OpenAI and Anthropic wire formats (:class:`ScriptedModelServer`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fxdurable.testing.blob_invariants import check_blobs
from fxdurable.testing.clock import FakeClock
from fxdurable.testing.invariants import Effect, Violation, check_effects, check_store

if TYPE_CHECKING:
    from fxdurable.testing.model_server import (
        Failure,
        Quirks,
        RecordedRequest,
        ScriptedModelServer,
    )

__all__ = [
    "Effect",
    "Failure",
    "FakeClock",
    "Quirks",
    "RecordedRequest",
    "ScriptedModelServer",
    "Violation",
    "check_blobs",
    "check_effects",
    "check_store",
]

_SERVER_NAMES = {"Failure", "Quirks", "RecordedRequest", "ScriptedModelServer"}


def __getattr__(name: str) -> Any:
    # Imported on first use, not here: ``python -m fxdurable.testing.model_server`` would
    # otherwise find its module already imported by this package (a runpy warning), and
    # ``fxdurable check`` need not load an HTTP server.
    if name in _SERVER_NAMES:
        from fxdurable.testing import model_server

        return getattr(model_server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
