"""Benchmarks for fxdurable's durability overhead (DESIGN §8), run with ``make bench``.

Every figure is reported beside a baseline measured in the same run on the same machine: a raw
SQLite commit (WAL, one small INSERT per transaction) at ``synchronous=FULL`` and ``NORMAL``.
The ratios are the result; the absolute microseconds only say what the machine was like.
Nothing here asserts a timing: ``tests/bench/test_bench_smoke.py`` only checks that a quick
run completes and prints its ratio lines.

Where ``redis-server`` is installed, the bench starts its own (and stops it at the end) and
adds two more baselines: a raw Redis round trip for the Redis store's steps, and RQ's own no-op
job rate for fxdurable turns per second on 1 and 2 RQ worker processes. Without it, a line says
the Redis/RQ rows were skipped and why; the SQLite figures are printed all the same.

Modules: :mod:`bench.timing` (batches, medians, machine description),
:mod:`bench.sqlite_steps` (raw commits, journal steps, growth with session length, resume reads),
:mod:`bench.runtime_turns` (end-to-end turns through the embedded runtime),
:mod:`bench.redis_server` (the bench's own redis-server),
:mod:`bench.redis_steps` (raw round trips, journal steps and growth on the Redis store),
:mod:`bench.rq_throughput` (turns/s on RQ workers beside RQ's no-op job rate; its no-op job is
:func:`bench.rq_noop.noop`),
:mod:`bench.report` (the printed tables),
:mod:`bench.pg_workers` (issue 27: turns and tool steps per second on 4 and 1 ``fxdurable worker
--queue postgresql://`` processes sharing one database, each run checked exactly-once from the
database by :mod:`bench.pg_exactly_once`; its processes are :mod:`bench.pg_worker_set`'s, its
agent :mod:`bench.pg_noop_agent`; ``--only pg-workers`` alone).

The headline (issue 10; ``--only headline`` alone, ``--no-headline`` without it) compares
fxdurable with its peers in the same run: :mod:`bench.peers` runs the same workloads (N no-op
steps in one durable unit, sequential; and issue 23's parallel batch of 8, per call, which
``--only batch`` measures alone) on :mod:`bench.peer_fxdurable`, :mod:`bench.peer_dbos` and
:mod:`bench.peer_langgraph`, each in a subprocess; :mod:`bench.runtime_growth` (a runtime step
late in a long session ÷ early in a short one) and :mod:`bench.rss_turns` (RSS over a long
session) add the rest; :mod:`bench.headline_measure` runs it all, :mod:`bench.headline` builds
the table, :mod:`bench.results_file` writes ``bench/results/latest.json`` and
``docs/benchmarks.md`` (``--write``, which ``make bench`` passes). The peers are installed only
into ``.venv-bench`` (``make bench-venv``, from ``bench/requirements-peers.txt``); without them
their cells say "not installed".
"""
