"""The soak (``make soak``, ``python -m bench.soak``): random SIGKILLs, store outages and pauses
for minutes on every store/queue pair, judged by effect ledgers, the store and ``fxdurable
check``. The crash suites kill at named points; this finds what only random timing finds.

Modules: :mod:`bench.soak.agent` (the scripted agent and its ledgered tools),
:mod:`bench.soak.ledger` (the outside world's files and the double-effect count),
:mod:`fxdurable.testing.faults` (the TCP proxy that stalls, black-holes or refuses),
:mod:`bench.soak.pairs` (servers, URLs and faults per pair), :mod:`bench.soak.procs` (worker
processes), :mod:`bench.soak.embedded` (the embedded runtime's process),
:mod:`bench.soak.run` (one pair's soak), :mod:`bench.soak.verify` (the verdict at rest).
docs/soak.md says how to run it and what the last long run found.
"""
