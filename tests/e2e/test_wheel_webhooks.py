"""A settlement webhook from the installed wheel, in an empty directory: the user's program
runs an agent with ``fx.Webhook`` against its own receiver, which checks the signature with
``fx.verify_webhook`` (the repository is not on ``sys.path``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from wheel_support import clean_env, run, wheel_venv

APP = """
import asyncio
import http.server
import json
import threading

import fxdurable as fx

SECRET = "whsec-0123456789abcdef"
got: list[dict[str, object]] = []
arrived = threading.Event()


class Receiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        sent = fx.verify_webhook(body, self.headers["x-fxdurable-signature"], SECRET)
        got.append({"delivery": self.headers["x-fxdurable-delivery"], **sent})
        self.send_response(204)
        self.end_headers()
        arrived.set()

    def log_message(self, *args: object) -> None:
        pass


async def main() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    hook = fx.Webhook(url=f"http://127.0.0.1:{server.server_port}/done", secret=SECRET)
    agent = fx.Agent("a", fx.ScriptedModel([fx.reply("shipped")]), webhook=hook)
    async with fx.Runtime([agent], store="sqlite:///app.db") as rt:
        session = rt.session("s")
        sub = await session.wait((await session.submit("ship it")).id, timeout=30)
        assert await asyncio.to_thread(arrived.wait, 30), "no webhook arrived"
        for _ in range(600):  # the delivery's record follows the receiver's answer
            events = await session.events()
            if events[-1].type == "webhook.delivered":
                break
            await asyncio.sleep(0.05)
    print(json.dumps({"submission": sub.id, "got": got, "last": events[-1].type}))


asyncio.run(main())
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_users_agent_posts_its_settlement_webhook_from_the_wheel(tmp_path: Path) -> None:
    venv = wheel_venv()
    work = tmp_path / "work"
    work.mkdir()
    (work / "app.py").write_text(APP)
    out = run([str(venv.python), "app.py"], cwd=work, env=clean_env(), timeout=120, what="app.py")
    printed = json.loads(out.strip().splitlines()[-1])
    ((sent,),) = [printed["got"]]
    assert sent["delivery"] == printed["submission"] == sent["submission"]
    assert (sent["type"], sent["outcome"], sent["text"]) == ("turn_end", "completed", "shipped")
    assert printed["last"] == "webhook.delivered"
