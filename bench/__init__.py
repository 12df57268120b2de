"""Benchmarks for fxdurable's durability overhead (DESIGN §8), run with ``make bench``.

Every figure is reported beside a baseline measured in the same run on the same machine: a raw
SQLite commit (WAL, one small INSERT per transaction) at ``synchronous=FULL`` and ``NORMAL``.
The ratios are the result; the absolute microseconds only say what the machine was like.
Nothing here asserts a timing: ``tests/bench/test_bench_smoke.py`` only checks that a quick
run completes and prints its ratio lines.

Modules: :mod:`bench.timing` (batches, medians, machine description),
:mod:`bench.sqlite_steps` (raw commits, journal steps, growth with session length, resume reads),
:mod:`bench.runtime_turns` (end-to-end turns through the embedded runtime),
:mod:`bench.report` (the printed table).
"""
