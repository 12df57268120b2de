"""Test support shipped with the package: the crash-invariant checker (users can audit their
own stores with it, and ``fxdurable check`` runs it)."""

from fxdurable.testing.invariants import Effect, Violation, check_effects, check_store

__all__ = ["Effect", "Violation", "check_effects", "check_store"]
