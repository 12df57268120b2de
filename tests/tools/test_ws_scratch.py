"""Scratch directories of the stored workspace's shell: named after their process, and those
of dead processes of this host swept when a new one is made (a SIGKILLed worker cannot remove
its own). The worker-pool test of a kill mid-shell checks none is left behind
(tests/workers/test_rq_coding_agent.py)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from fxdurable.tools import scratch
from tests.runtime.fxrt_support import dead_pid


def test_only_the_scratch_of_a_dead_process_of_this_host_is_swept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(scratch.tempfile, "tempdir", None)  # read TMPDIR again
    mine = scratch.host_prefix(socket.gethostname())
    dead, alive = dead_pid(), os.getpid()
    names = [
        f"{mine}{dead}-abc",  # a killed worker's
        f"{mine}{alive}-def",  # this process's, in use
        f"{scratch.host_prefix('another-host')}{dead}-ghi",  # another host's, on a shared /tmp
        f"{mine}x{dead}-jkl",  # not a name this module makes
        "unrelated",
    ]
    for name in names:
        (tmp_path / name / "src").mkdir(parents=True)
        (tmp_path / name / "src" / "app.py").write_text("x = 1\n")
    made = scratch.make_scratch()
    assert made.parent == tmp_path and made.name.startswith(f"{mine}{alive}-")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*names[1:], made.name])
