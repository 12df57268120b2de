"""RQ's own baseline job: an importable function that does nothing.

It lives in a module of its own that imports nothing, so a work horse that imports it for its
job pays nothing fxdurable's horses do not (``fxdurable worker`` imports the agents module in
the parent, before it forks).
"""


def noop() -> None:
    """The no-op job of :mod:`bench.rq_throughput`."""
