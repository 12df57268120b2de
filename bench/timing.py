"""Timing helpers: interleaved batches, the median of per-op times, and the machine's shape.

Cases that are compared are measured in alternating batches (A, B, A, B, ...) rather than one
after the other, so a drift during the run (page cache, another process, a WAL checkpoint)
lands on both sides of a ratio. Each case's figure is the median over its batches.
"""

from __future__ import annotations

import os
import platform
import sqlite3
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

__all__ = ["Samples", "filesystem_of", "machine_facts", "machine_line"]


class Samples:
    """Per-op seconds, one sample per batch, keyed by case name."""

    def __init__(self) -> None:
        self._per_op: dict[str, list[float]] = defaultdict(list)

    def add(self, name: str, seconds: float, ops: int) -> None:
        self._per_op[name].append(seconds / ops)

    def batch(self, name: str, op: Callable[[], object], ops: int) -> None:
        """Time ``ops`` calls of ``op`` as one batch."""
        start = time.perf_counter()
        for _ in range(ops):
            op()
        self.add(name, time.perf_counter() - start, ops)

    def median(self, name: str) -> float:
        """Median seconds per op over the batches of ``name``."""
        return statistics.median(self._per_op[name])


def filesystem_of(path: Path) -> str:
    """The filesystem type holding ``path`` (from /proc/mounts), or "unknown"."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return "unknown"
    target = str(path.resolve())
    best, kind = "", "unknown"
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        mount_point, fs_type = fields[1], fields[2]
        prefix = mount_point.rstrip("/") + "/"
        if (target == mount_point or target.startswith(prefix)) and len(mount_point) > len(best):
            best, kind = mount_point, fs_type
    return kind


def machine_facts(db_dir: Path) -> dict[str, str | int]:
    """CPUs (usable and present), Python, SQLite, OS, and the filesystem under ``db_dir``."""
    if hasattr(os, "sched_getaffinity"):
        nproc = len(os.sched_getaffinity(0))  # what this process may use, like nproc(1)
    else:
        nproc = os.cpu_count() or 1
    return {
        "nproc": nproc,
        "cpu_count": os.cpu_count() or 1,
        "python": platform.python_implementation() + " " + ".".join(map(str, sys.version_info[:3])),
        "sqlite": sqlite3.sqlite_version,
        "os": f"{platform.system()} {platform.release()}",
        "filesystem": filesystem_of(db_dir),
    }


def machine_line(db_dir: Path) -> str:
    m = machine_facts(db_dir)
    return (
        f"machine: nproc {m['nproc']}, {m['python']}, SQLite {m['sqlite']}, {m['os']}; "
        f"databases in {db_dir} ({m['filesystem']})"
    )
