"""Adding up what model calls spent: the running totals the spending budgets read.

Generic over :class:`~fxdurable.core.records.Usage`'s fields, so a token count added to it
later (cached tokens, reasoning tokens) is summed without a change here: integers add, and a
cost adds where either side knows it (None only when neither does).
"""

from __future__ import annotations

import dataclasses

from fxdurable.core.records import Usage

__all__ = ["add_usage"]


def add_usage(total: Usage, more: Usage) -> Usage:
    summed: dict[str, object] = {}
    for f in dataclasses.fields(Usage):
        a, b = getattr(total, f.name), getattr(more, f.name)
        if a is None or b is None:
            summed[f.name] = b if a is None else a
        elif isinstance(a, bool):
            summed[f.name] = a or b
        elif isinstance(a, float) or isinstance(b, float):
            summed[f.name] = round(a + b, 8)  # no float noise in a dollar total
        elif isinstance(a, int):
            summed[f.name] = a + b
        else:
            summed[f.name] = a
    return Usage(**summed)  # type: ignore[arg-type]
