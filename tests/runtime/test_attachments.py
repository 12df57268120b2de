"""Images and documents in prompts (docs/attachments.md): the model reads their bytes, the
records and events keep only refs, and a bad attachment writes nothing."""

from __future__ import annotations

import base64
import dataclasses
import json

import pydantic
import pytest
from fxrt_support import (
    FAST,
    db_url,
    events,
    fresh_store,
    leave_crashed_turn,
    owned_store,
    read,
    run,
)

import fxdurable as fx
from fxdurable.core.recordcodec import encode
from fxdurable.runtime.attachments import (
    attachment_from_bytes,
    attachment_from_path,
    attachment_from_url,
    store_attachments,
)

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(256)) * 4
PDF = b"%PDF-1.7\n" + b"a document body " * 50


class Shot(pydantic.BaseModel):
    page: str


def _seen(model: fx.ScriptedModel) -> list[tuple[str, tuple]]:
    return [(m.role, m.attachments) for r in model.requests for m in r.messages]


def test_a_prompts_image_reaches_the_model_as_bytes_and_the_records_keep_only_its_ref(tmp_path):
    model = fx.ScriptedModel(lambda r: fx.reply("a picture"))
    agent = fx.Agent("eng", model)

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s1")
            image = attachment_from_bytes(PNG, name="plot.png")
            link = attachment_from_url("https://example.com/a.pdf")
            answer = await s.run("what is this?", attachments=[image, link])
            assert answer == "a picture"
            (request,) = model.requests
            user = request.messages[-1]
            assert [(a.media_type, a.data, a.url, a.name) for a in user.attachments] == [
                ("image/png", PNG, None, "plot.png"),
                ("application/pdf", None, "https://example.com/a.pdf", None),
            ]
            # A retry with the same request id is the same submission, attachments and all.
            again = await s.submit("q2", request_id="r1", attachments=[image])
            assert (await s.submit("q2", request_id="r1", attachments=[image])).id == again.id
            with pytest.raises(fx.RequestConflictError):
                await s.submit("q2", request_id="r1")
            await s.wait(again.id, timeout=10)
            # The second turn's request still carries the first prompt's image, read again.
            assert model.requests[-1].messages[0].attachments[0].data == PNG
            # So does a third with no attachment of its own: the image is in the part of the
            # conversation this process built before (runtime/conversation.py), not the tail.
            assert await s.run("and now?") == "a picture"
            assert model.requests[-1].messages[0].attachments[0].data == PNG
            records = read(
                rt,
                lambda v: [*v.messages("s1"), *v.submissions("s1")],
            )
            refs = [m.attachments for m in records]
            assert refs[0][0].size == len(PNG) and refs[0][0].digest is not None
            assert rt.journal.store.get_blob(refs[0][0].digest) == PNG
            # Neither the bytes nor their base64 are in any record or event.
            stored = json.dumps([encode(r) for r in [*records, *events(rt, "s1")]])
            assert base64.b64encode(PNG).decode()[:40] not in stored
            assert PNG.decode("latin-1")[:40] not in stored

    run(main())


def test_a_bad_attachment_is_refused_before_anything_is_written(tmp_path):
    agent = fx.Agent("eng", fx.ScriptedModel(lambda r: fx.reply("no")))
    jpeg_claimed = fx.Attachment(media_type="image/jpeg", data=PNG)

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s1")
            for bad in (
                jpeg_claimed,
                fx.Attachment(media_type="text/plain", data=b"hi"),
                fx.Attachment(media_type="image/png", url="http://example.com/a.png"),
                fx.Attachment(media_type="image/png"),
            ):
                with pytest.raises(fx.AttachmentError):
                    await s.submit("look", attachments=[attachment_from_bytes(PDF), bad])
            assert await s.record() is None  # no session, no submission
            assert rt.journal.store.get_blob(_digest(PDF)) is None  # not even the good blob

    run(main())


def test_attachment_constructors_sniff_the_type_and_check_the_size(tmp_path):
    path = tmp_path / "scan.pdf"
    path.write_bytes(PDF)
    assert attachment_from_path(path) == fx.Attachment(
        media_type="application/pdf", data=PDF, name="scan.pdf"
    )
    with pytest.raises(fx.AttachmentError):
        attachment_from_bytes(b"plain text")
    with pytest.raises(fx.AttachmentError):
        attachment_from_url("https://example.com/no-extension")


def test_a_missing_blob_fails_the_turn_loudly(tmp_path):
    model = fx.ScriptedModel(lambda r: fx.reply("never"))
    agent = fx.Agent("eng", model)
    image = attachment_from_bytes(PNG)

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s1")
            # Admit a ref whose blob was never put (as if the blob data were lost).
            ref = dataclasses.replace((await _refs(rt, image))[0], digest="0" * 64)
            admitted = await _admit(rt, ref)
            sub = await s.wait(admitted, timeout=10)
            assert sub.status.value == "failed"
            assert "not in the store" in (sub.error.message if sub.error else "")
            assert not model.requests  # the model was never sent a request without it

    run(main())


def _digest(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


async def _refs(rt: fx.Runtime, attachment: fx.Attachment):
    from fxdurable.runtime.attachments import store_attachments

    return store_attachments(rt.journal.store.put_blob, [attachment])


async def _admit(rt: fx.Runtime, ref) -> str:
    admission = rt.journal.admit("s1", agent="eng", prompt="look", attachments=(ref,))
    await rt.session("s1").resume()
    return admission.submission.id


def test_a_tools_image_is_recorded_as_a_ref_and_the_model_reads_its_bytes(tmp_path):
    async def screenshot(inp: Shot, ctx: fx.ToolContext) -> fx.ToolResult:
        return fx.ToolResult(f"the {inp.page} page", [attachment_from_bytes(PNG)])

    tool = fx.define_tool(
        "screenshot", description="a page's picture", input_model=Shot, execute=screenshot
    )

    def policy(request: fx.ModelRequest) -> fx.ModelResponse:
        if request.messages[-1].role == "tool":
            return fx.reply("looked")
        return fx.reply("", fx.call("screenshot", page="home"))

    model = fx.ScriptedModel(policy)
    agent = fx.Agent("eng", model, tools=[tool])

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            assert await rt.session("s1").run("show me") == "looked"
            result = model.requests[-1].messages[-1]
            assert (result.role, result.text) == ("tool", "the home page")
            assert [(a.media_type, a.data) for a in result.attachments] == [("image/png", PNG)]
            (task,) = read(rt, lambda v: v.session_tool_tasks("s1"))
            assert [(r.digest, r.size) for r in task.attachments] == [(_digest(PNG), len(PNG))]
            stored = json.dumps([encode(r) for r in [task, *events(rt, "s1")]])
            assert base64.b64encode(PNG).decode()[:40] not in stored

    run(main())


def test_a_turn_a_dead_worker_left_still_sends_the_prompts_image(tmp_path):
    url = db_url(tmp_path)
    store = owned_store(url)
    refs = store_attachments(store.put_blob, [attachment_from_bytes(PNG)])
    store.close()
    # The worker admitted the prompt, claimed the session, began the attempt and was killed.
    crashed = leave_crashed_turn(url, agent="eng", attachments=refs, record_model=False)
    model = fx.ScriptedModel(lambda r: fx.reply("recovered"))

    async def main():
        async with fx.Runtime(
            [fx.Agent("eng", model)], store=owned_store(url), settings=FAST
        ) as rt:
            sub = await rt.session("s1").wait(crashed.submission.id, timeout=10)
            assert (sub.status.value, sub.result) == ("completed", "recovered")

    run(main())
    assert [a.data for a in model.requests[-1].messages[-1].attachments] == [PNG]
