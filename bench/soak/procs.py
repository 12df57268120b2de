"""The soak's processes: ``fxdurable worker`` (RQ or SQS) or the embedded runtime, started,
SIGKILLed (with or without their RQ work horses) and restarted; children found from /proc."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Proc", "child_pids", "proc_identity"]


def _stat_fields(pid: int) -> list[str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2 :].split()


def proc_identity(pid: int) -> tuple[int, int] | None:
    """(pid, start time in clock ticks): a pid may be reused, this pair is not."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    return pid, int(fields[19])


def child_pids(parent: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None and int(fields[1]) == parent and fields[0] not in ("Z", "X"):
                out.append(int(entry))
    return out


@dataclass
class Proc:
    """One long-running process of a pair, restartable; its output appends to ``log``."""

    name: str
    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: Path
    log: Path
    forks_horses: bool
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    horses_seen: set[tuple[int, int]] = field(default_factory=set)

    def start(self) -> None:
        self.starts += 1
        with self.log.open("ab") as out:
            out.write(f"--- start {self.starts} ---\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                list(self.argv),
                cwd=self.cwd,
                env=dict(self.env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def horses(self) -> list[int]:
        """The live RQ work horses (none for an SQS worker or the embedded runtime)."""
        if not (self.forks_horses and self.alive() and self.proc is not None):
            return []
        pids = child_pids(self.proc.pid)
        self.horses_seen.update(i for i in map(proc_identity, pids) if i is not None)
        return pids

    def kill_horse(self, pid: int) -> bool:
        if proc_identity(pid) is None:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            return True
        return False

    def kill(self) -> None:
        """SIGKILL the process and every horse it was seen with (a box lost)."""
        self.horses()
        doomed = [(p, s) for p, s in self.horses_seen if proc_identity(p) == (p, s)]
        for pid, _ in doomed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.horses_seen.clear()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait()
        # Orphaned horses are reaped by PID 1: wait until they are at least dead.
        deadline = time.monotonic() + 5
        while any(proc_identity(p) == (p, s) for p, s in doomed) and time.monotonic() < deadline:
            time.sleep(0.02)

    def stop(self, timeout_s: float = 20.0) -> int | None:
        """SIGTERM (a warm stop), SIGKILL after ``timeout_s``; the exit code of the warm stop
        or None when it had to be killed."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.horses()
            self.proc.send_signal(signal.SIGTERM)
            try:
                code: int | None = self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                code = None
        else:
            code = self.proc.returncode
        self.kill()
        return code

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""
