"""Erasure (issue 28 §3) on the embedded SQLite store, in process: ``session.erase()``
deletes the session's journal, events, state and the workspace blobs no other session names;
then nothing of its prompt, its tool results or its files is left in the raw file bytes.
Redis and DynamoDB+S3 (their raw keys and items) are tests/stores/test_erase_raw.py; the
SIGKILL mid-erase is tests/crash/test_crash_erase.py."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pydantic
import pytest

import fxdurable as fx
from fxdurable import tools as fxt
from fxdurable.core.journal.erase import ERASED_SOURCE
from fxdurable.errors import SessionBusyError, SessionNotFoundError
from fxdurable.stores.sqlite import SqliteStore
from fxdurable.testing.invariants import check_store
from tests.runtime.fxrt_support import FAST, events, fresh_store, read, rounds_done, run
from tests.tools.test_stored_workspace import scripted

PROMPT = "PROMPT-erase-me-4f1c"
FILE_TEXT = "FILE-erase-me-9b2e"
RESULT = "RESULT-erase-me-77aa"
KEPT = "KEPT-other-session-31d0"


def _turns(marker: str) -> dict[str, list[fx.ModelResponse]]:
    return {
        f"{marker} {PROMPT}" if marker == "one" else marker: [
            fx.reply("", fx.call("write_file", path="notes.txt", content=FILE_TEXT)),
            fx.reply("", fx.call("echo")),  # no shell: the fast tier starts no process
            fx.reply("done"),
        ],
        KEPT: [fx.reply("", fx.call("write_file", path="kept.txt", content=KEPT)), fx.reply("ok")],
    }


class _Empty(pydantic.BaseModel):
    pass


ECHO = fx.define_tool("echo", description="echo", input_model=_Empty, execute=lambda _, ctx: RESULT)


def raw_bytes(db: Path) -> bytes:
    """The store's file and its write-ahead log, as a disk would hold them."""
    return b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))


@pytest.fixture
def template(tmp_path: Path) -> Path:
    root = tmp_path / "template"
    root.mkdir()
    (root / "README.md").write_text("shared template file\n")
    return root


def test_erase_leaves_no_prompt_result_or_file_in_the_raw_sqlite_file(
    tmp_path: Path, template: Path
) -> None:
    ws = fxt.stored(template)
    tools = [*fxt.workspace_tools(ws), ECHO]
    agent = fx.Agent("coder", scripted(_turns("one")), tools=tools)
    store = fresh_store(tmp_path)
    db = Path(store.path)

    async def main() -> None:
        async with fx.Runtime([agent], store=store, settings=FAST) as rt:
            assert await rt.session("s1").run(f"one {PROMPT}", timeout=30) == "done"
            assert await rt.session("s2").run(KEPT, timeout=30) == "ok"
            fork = await rt.fork("s1", "f1")
            before = raw_bytes(db)
            for text in (PROMPT, FILE_TEXT, RESULT):
                assert text.encode() in before  # the search can find what is there
            report = await rt.session("s1").erase()
            assert report.records > 10 and report.forks == ["f1"]
            # The fork names every blob s1 did (its copy of the state): none is deleted yet.
            assert report.blobs_deleted == [] and len(report.blobs_kept) >= 2
            assert ws.files_of(store, "f1")["notes.txt"] == FILE_TEXT.encode()
            assert await rt.session("s1").record() is None
            with pytest.raises(SessionNotFoundError):
                await rt.session("s1").erase()
            # The other session's files, template included, are all still there.
            assert ws.files_of(store, "s2")["kept.txt"] == KEPT.encode()
            assert ws.files_of(store, "s2")["README.md"] == b"shared template file\n"
            # The fork keeps its own copy of the conversation; it no longer names its source.
            assert events(rt, fork.session_id)[0].data["forked_from"] == ERASED_SOURCE
            assert read(rt, lambda v: check_store(v, now=0.0, at_rest=True)).violations == ()
            # Erase the fork too: then nothing of that conversation is left anywhere.
            fork_report = await rt.session("f1").erase()
            # notes.txt's blob goes with the last session naming it; the template stays (s2).
            assert len(fork_report.blobs_deleted) == 1

    run(main())
    store.close()
    after = raw_bytes(db)
    for text in (PROMPT, FILE_TEXT, RESULT):
        assert text.encode() not in after, text
    assert KEPT.encode() in after


def test_erase_is_refused_while_a_turn_runs_unless_forced(tmp_path: Path) -> None:
    started, release = threading.Event(), threading.Event()

    def hold(_: _Empty, ctx: fx.ToolContext) -> str:
        started.set()
        release.wait(10)
        return RESULT

    tool = fx.define_tool("hold", description="hold", input_model=_Empty, execute=hold)
    model = fx.ScriptedModel(
        lambda r: fx.reply("done") if rounds_done(r) else fx.reply("", fx.call("hold"))
    )
    agent = fx.Agent("a", model, tools=[tool])
    store = fresh_store(tmp_path)

    async def main() -> None:
        async with fx.Runtime([agent], store=store, settings=FAST) as rt:
            session = rt.session("s1")
            await session.submit(PROMPT)
            assert await asyncio.to_thread(started.wait, 10)
            with pytest.raises(SessionBusyError):
                await session.erase()
            assert await session.record() is not None  # nothing was erased
            report = await session.erase(force=True)
            assert len(report.aborted) == 1
            assert await session.record() is None
            release.set()

    run(main())
    # The runtime has stopped, its turn with it: the worker that held the turn found its
    # lease fenced and the session gone, and wrote nothing back.
    again = SqliteStore(store.url)
    assert again.read(lambda v: (list(v.list_sessions()), list(v.events("s1")))) == ([], [])
    again.close()
