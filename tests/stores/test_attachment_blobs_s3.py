"""An image prompt on DynamoDB with an S3 bucket (docs/attachments.md): the image's bytes are
an S3 object under its digest, the model still reads them, and no DynamoDB record holds them
(moto in server mode)."""

from __future__ import annotations

import asyncio
import base64
import hashlib

from aws_support import aws_session
from dynamo_support import dynamo_url, offloaded_keys

import fxdurable as fx
from fxdurable.core.recordcodec import encode
from fxdurable.runtime.attachments import attachment_from_bytes
from fxdurable.stores.dynamodb import DynamoStore

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 64  # 16 KiB: past the offload threshold


def test_an_image_prompts_blob_lands_in_s3_and_reaches_the_model(moto_server: str) -> None:
    url = dynamo_url(moto_server, offload_threshold=1024)
    store = DynamoStore(url, create=True, session=aws_session())
    model = fx.ScriptedModel(lambda r: fx.reply("seen"))

    async def main() -> None:
        async with fx.Runtime([fx.Agent("eye", model)], store=store) as rt:
            s = rt.session("s1")
            assert await s.run("look", attachments=[attachment_from_bytes(PNG)]) == "seen"
            records = rt.journal.read(lambda v: [*v.messages("s1"), *v.submissions("s1")])
            encoded = str([encode(r) for r in [*records, *await s.events()]])
            assert base64.b64encode(PNG).decode()[:40] not in encoded

    asyncio.run(main())
    assert model.requests[-1].messages[-1].attachments[0].data == PNG
    assert f"fxd-blobs/sha256/{hashlib.sha256(PNG).hexdigest()}" in offloaded_keys(url)
