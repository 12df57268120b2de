"""The ``spans`` fixture: spans recorded by the OpenTelemetry SDK's in-memory exporter.

A tracer provider can be installed once per process, so one is installed on first use and
switched on only inside a test that asks for ``spans``: the rest of the suite runs with
OpenTelemetry imported (by this module's collection) but every span sampled out, which costs
fxdurable no store read (see ``tracing.attempt``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    Sampler,
    SamplingResult,
)


class _Switch(Sampler):
    """Samples every span while a ``spans`` test runs, none otherwise."""

    on = False

    def should_sample(self, *args, **kwargs) -> SamplingResult:  # type: ignore[no-untyped-def]
        return (ALWAYS_ON if self.on else ALWAYS_OFF).should_sample(*args, **kwargs)

    def get_description(self) -> str:
        return "fxdurable-tests-switch"


_SWITCH = _Switch()
_EXPORTER = InMemorySpanExporter()
_installed = False


class Spans:
    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self._exporter = exporter

    def all(self) -> Sequence[ReadableSpan]:
        return self._exporter.get_finished_spans()

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.all() if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, f"{len(found)} {name} spans: {[s.name for s in self.all()]}"
        return found[0]


@pytest.fixture
def spans() -> Iterator[Spans]:
    global _installed
    if not _installed:
        provider = TracerProvider(sampler=_SWITCH)
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
        _installed = True
    _EXPORTER.clear()
    _SWITCH.on = True
    try:
        yield Spans(_EXPORTER)
    finally:
        _SWITCH.on = False
        _EXPORTER.clear()
