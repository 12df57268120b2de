"""The console's routes: ``GET /sessions`` (scoping, states, filter, pages), ``GET
/sessions/{id}/trace`` (the lines ``fxdurable trace`` prints), the static files under
``/console`` and ``GET /`` under ``--dev``.

The app runs in process over a real SQLite store, with its runtime not started: the sessions
are put in each state through the journal, and nothing runs them on."""

from __future__ import annotations

import asyncio
import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from raw_http import exchange

from fxdurable.backends import open_store
from fxdurable.cli.demo import run_demo
from fxdurable.cli.demo_agent import engineer
from fxdurable.cli.trace import print_trace
from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Journal, WorkerIdentity
from fxdurable.http import BearerTokens, HttpSettings, create_app, dev_principal
from fxdurable.http.console_static import STATIC_DIR
from fxdurable.http.scoping import session_key
from fxdurable.runtime.runtime import Runtime

ALICE_TOKEN = "alice-token-0123456789abcdef"
BOB_TOKEN = "bob-token-0123456789abcdef"
ALICE = {"Authorization": f"Bearer {ALICE_TOKEN}"}
BOB = {"Authorization": f"Bearer {BOB_TOKEN}"}
WORKER = WorkerIdentity(host="test-host", pid=os.getpid())


class _Client:
    """Requests to the app in process (httpx's ASGI transport), one event loop each."""

    def __init__(self, app: Any) -> None:
        self._app = app

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        async def send() -> httpx.Response:
            transport = httpx.ASGITransport(app=self._app)
            async with httpx.AsyncClient(transport=transport, base_url="http://console") as c:
                return await c.request(method, path, **kwargs)

        return asyncio.run(send())

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", path, **kwargs)


def _client(
    store_url: str, tmp_path: Path, *, dev: bool, console_dir: Path = STATIC_DIR
) -> _Client:
    runtime = Runtime([engineer(tmp_path)], store=store_url)
    authenticate = dev_principal if dev else BearerTokens({ALICE_TOKEN: "alice", BOB_TOKEN: "bob"})
    app = create_app(
        runtime,
        authenticate=authenticate,
        settings=HttpSettings(dev=dev),
        manage_runtime=False,
        console_dir=console_dir,
    )
    # No lifespan: the runtime's workers never start, so the sessions stay in the states the
    # test put them in.
    return _Client(app)


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[tuple[str, Journal]]:
    url = f"sqlite:///{tmp_path}/console.db"
    store = open_store(url)
    try:
        yield url, Journal(store, SystemClock(), RandomIds())
    finally:
        store.close()


def _admit(journal: Journal, principal: str | None, public: str, prompt: str = "go") -> str:
    key = public if principal is None else session_key(principal, public)
    admission = journal.admit(key, agent="engineer", prompt=prompt, owner=principal)
    return admission.submission.id


def _settled(journal: Journal, principal: str, public: str, outcome: str) -> None:
    sub = _admit(journal, principal, public)
    fence = journal.claim(session_key(principal, public), WORKER, ttl_s=30)
    assert fence is not None
    journal.begin_attempt(fence, sub, worker="w")
    journal.settle(fence, sub, outcome, text="done")  # type: ignore[arg-type]
    journal.release(fence)


def _running(journal: Journal, principal: str, public: str, question: str | None = None) -> None:
    sub = _admit(journal, principal, public)
    fence = journal.claim(session_key(principal, public), WORKER, ttl_s=30)
    assert fence is not None
    journal.begin_attempt(fence, sub, worker="w")
    if question is not None:
        journal.request_input(fence, sub, question=question, about="exhausted")
        journal.release(fence)


def _rows(response: Any) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    return list(response.json()["sessions"])


def test_the_list_shows_the_callers_sessions_with_state_outcome_and_question(journal, tmp_path):
    url, j = journal
    _settled(j, "alice", "done", "completed")
    _settled(j, "alice", "broke", "failed")
    _admit(j, "alice", "queued")
    _running(j, "alice", "busy")
    _running(j, "alice", "asks", question="Spend another attempt?")
    _admit(j, "bob", "bobs")
    _admit(j, None, "in-process")
    client = _client(url, tmp_path, dev=False)

    rows = _rows(client.get("/sessions", headers=ALICE))
    by_id = {r["id"]: r for r in rows}
    assert [r["id"] for r in rows] == ["asks", "busy", "queued", "broke", "done"]  # newest first
    assert by_id["done"]["state"] == "idle" and by_id["done"]["lastOutcome"] == "completed"
    assert by_id["broke"]["lastOutcome"] == "failed" and by_id["broke"]["unsettled"] == 0
    assert by_id["queued"]["state"] == "queued" and by_id["queued"]["unsettled"] == 1
    assert by_id["busy"]["state"] == "running" and by_id["busy"]["lastOutcome"] is None
    assert by_id["asks"]["state"] == "waiting"
    assert by_id["asks"]["question"] == "Spend another attempt?"
    assert all(r["agent"] == "engineer" for r in rows)
    assert all(r["updatedAt"] >= r["createdAt"] > 0 for r in rows)
    # Bob sees his own only; nobody with a token sees the in-process session.
    assert [r["id"] for r in _rows(client.get("/sessions", headers=BOB))] == ["bobs"]
    assert client.get("/sessions").status_code == 401

    filtered = client.get("/sessions", params={"state": ["running", "waiting"]}, headers=ALICE)
    assert [r["id"] for r in _rows(filtered)] == ["asks", "busy"]
    idle = client.get("/sessions", params={"state": "idle"}, headers=ALICE)
    assert [r["id"] for r in _rows(idle)] == ["broke", "done"]

    bad = client.get("/sessions", params={"state": "sleeping"}, headers=ALICE)
    assert bad.status_code == 400 and bad.json()["code"] == "bad_state"
    for limit in ("0", "201", "x", "", "²", "0000050"):
        bad = client.get("/sessions", params={"limit": limit}, headers=ALICE)
        assert bad.status_code == 400 and bad.json()["code"] == "bad_limit"
    bad = client.get("/sessions", params={"after": "not-a-page"}, headers=ALICE)
    assert bad.status_code == 400 and bad.json()["code"] == "bad_after"


def test_pages_cover_every_session_once_in_order(journal, tmp_path):
    url, j = journal
    for n in range(7):
        _admit(j, "alice", f"s{n}")
    client = _client(url, tmp_path, dev=False)
    seen: list[str] = []
    after: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 3, **({"after": after} if after else {})}
        reply = client.get("/sessions", params=params, headers=ALICE).json()
        seen += [r["id"] for r in reply["sessions"]]
        pages += 1
        after = reply["next"]
        if after is None:
            break
    assert seen == [f"s{n}" for n in reversed(range(7))] and pages == 3
    # A session updated meanwhile moves to the front; the pages after it are not disturbed.
    _admit(j, "alice", "s0", prompt="again")
    first = client.get("/sessions", params={"limit": 1}, headers=ALICE).json()
    assert [r["id"] for r in first["sessions"]] == ["s0"]


def test_under_dev_the_list_and_routes_show_in_process_sessions(journal, tmp_path):
    url, j = journal
    _admit(j, None, "engineer")
    _admit(j, "dev", "mine")
    _admit(j, "alice", "hers")
    client = _client(url, tmp_path, dev=True)
    assert [r["id"] for r in _rows(client.get("/sessions"))] == ["mine", "engineer"]
    assert client.get("/sessions/engineer").json()["sessionId"] == "engineer"
    assert client.get("/sessions/hers").status_code == 404
    # A fork of it is the dev caller's to open too.
    fork = client.post("/sessions/engineer/fork", json={"newSessionId": "copy"})
    assert fork.status_code == 201, fork.text
    assert client.get("/sessions/copy").status_code == 200


def test_the_trace_route_answers_the_lines_fxdurable_trace_prints(tmp_path, capsys):
    demo = tmp_path / "demo"
    assert run_demo(crash_at=None, directory=str(demo), budget_s=None) == 0
    capsys.readouterr()
    url = f"sqlite:///{demo.resolve()}/demo.db"
    printed = io.StringIO()
    store = open_store(url)
    try:
        assert print_trace(store, "engineer", printed) == 0
    finally:
        store.close()

    client = _client(url, demo, dev=True)
    reply = client.get("/sessions/engineer/trace")
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["sessionId"] == "engineer"
    lines = body["lines"]
    expected = printed.getvalue().splitlines()
    for got, want in zip(lines, expected, strict=True):
        assert want.endswith(got["text"]), (got, want)
        if got["cursor"] is not None:
            assert want.split()[0] == str(got["cursor"])
    kinds = [line["kind"] for line in lines]
    assert kinds[0] == "session" and kinds[-2:] == ["submission", "total"]
    assert "tool.completed" in kinds and "submission.completed" in kinds
    totals = body["totals"]
    assert totals["turns"] == 1 and totals["attempts"] == 1 and totals["interruptions"] == 0
    assert totals["inputTokens"] > 0 and totals["outputTokens"] > 0
    # Every fork point forks: a cursor after a step, a settled submission's id.
    points = [line["forkAfter"] for line in lines if line["forkAfter"] is not None]
    assert any(isinstance(p, int) for p in points) and isinstance(points[-1], str)
    for n, after in enumerate((points[0], points[-1])):
        fork = client.post(
            "/sessions/engineer/fork", json={"newSessionId": f"f{n}", "after": after}
        )
        assert fork.status_code == 201, fork.text
    assert client.get("/sessions/nope/trace").status_code == 404
    assert (
        _client(url, demo, dev=False).get("/sessions/engineer/trace", headers=ALICE).status_code
        == 404
    )


# -- the console's files ---------------------------------------------------------------------


@pytest.fixture
def console_files(tmp_path: Path) -> Path:
    """A console of an index page, a JavaScript module and a stylesheet."""
    root = tmp_path / "static"
    root.mkdir()
    (root / "index.html").write_text("<!doctype html><html><body>console</body></html>\n")
    (root / "app.js").write_text("export const answer = 42;\n")
    (root / "style.css").write_text("body { color: black; }\n")
    (root / ".hidden").write_text("not for the web")
    (tmp_path / "secret.txt").write_text("not for the web")
    return root


def test_the_console_files_are_served_with_their_types_and_nothing_else(
    journal, tmp_path, console_files
):
    url, _ = journal
    client = _client(url, tmp_path, dev=False, console_dir=console_files)
    for path in ("/console", "/console/"):
        page = client.get(path)  # no token asked: the page asks for one on a 401
        assert page.status_code == 200
        assert page.headers["content-type"] == "text/html; charset=utf-8"
        assert page.text.startswith("<!doctype html><html><body>console")
    module = client.get("/console/app.js")
    assert module.status_code == 200 and module.text == "export const answer = 42;\n"
    assert module.headers["content-type"] == "text/javascript; charset=utf-8"
    assert module.headers["x-content-type-options"] == "nosniff"
    style = client.get("/console/style.css")
    assert style.headers["content-type"] == "text/css; charset=utf-8"

    secret = tmp_path / "secret.txt"
    for path in (
        "/console/missing.js",
        "/console/../secret.txt",
        "/console/%2e%2e/secret.txt",
        "/console/..%2fsecret.txt",
        f"/console/{'../' * 12}{secret}",
        "/console//etc/passwd",
        "/console/.hidden",
    ):
        answer = client.get(path)
        assert answer.status_code == 404, (path, answer.status_code)
        assert "not for the web" not in answer.text
    # Without the files, /console says so (a page, not a 404 that looks like a wrong URL).
    empty = _client(url, tmp_path, dev=False, console_dir=tmp_path / "none")
    assert "not installed" in empty.get("/console/").text
    # Without --dev, / is no page at all.
    assert client.get("/").status_code == 404


def test_the_packages_own_console_is_served(journal, tmp_path):
    url, _ = journal
    client = _client(url, tmp_path, dev=False)
    page = client.get("/console/")
    assert page.status_code == 200 and "<html" in page.text.lower()
    assert "not installed" not in page.text
    module = client.get("/console/app.js")
    assert module.status_code == 200
    assert module.headers["content-type"] == "text/javascript; charset=utf-8"


def test_under_dev_the_root_redirects_to_the_console(journal, tmp_path):
    url, _ = journal
    client = _client(url, tmp_path, dev=True)
    answer = client.get("/")
    assert answer.status_code == 307 and answer.headers["location"] == "/console/"


def test_names_no_file_can_have_are_a_404_over_http_without_a_traceback(served):
    """A NUL in the name, or a name longer than a filesystem allows: resolve() raises on both,
    which once answered 500 and logged two tracebacks. A real server, raw requests."""
    app = served()
    app.start()
    for target in (
        "/console/a%00b",
        "/console/%00",
        f"/console/{'a' * 256}.js",
        f"/console/{'a' * 255}",  # as long as a name may be, and absent
        f"/console/{'d/' * 2100}x.js",  # a path longer than PATH_MAX
    ):
        answer = exchange(app.port, "GET", target, [], timeout_s=10.0)
        assert answer.status == 404, (target[:60], answer.status, answer.body[:300])
        assert json.loads(answer.body)["code"] == "not_found"
    assert app.proc is not None and app.proc.poll() is None
    log = app.output()
    assert "Traceback" not in log and "Exception in ASGI" not in log, log[-3000:]
