"""Shared fixtures; see tests/crash for the crash suite."""
