"""Test support shipped with the package: the crash-invariant checker (users audit their own
stores with it, and ``fxdurable check`` runs it) and a hand-moved clock."""

from fxdurable.testing.clock import FakeClock
from fxdurable.testing.invariants import Effect, Violation, check_effects, check_store

__all__ = ["Effect", "FakeClock", "Violation", "check_effects", "check_store"]
