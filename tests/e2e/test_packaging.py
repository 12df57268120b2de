"""What an index and a user get (issue 21 §1): ``make wheel``'s artifacts pass ``twine check``
and carry the metadata an index shows; the sdist holds the package and nothing local and
builds the same working wheel; every install form (the built wheel, a local path, a git URL,
the package name as an index resolves it) works with its extras; every extra imports its
optional modules; and a user's program type-checks with ``mypy --strict`` against the
installed wheel, from an empty directory.

docs/install.md shows these commands; its shell blocks name the tests here that run them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from wheel_support import (
    ALL_EXTRAS,
    REPO,
    built_sdist,
    built_wheel,
    clean_env,
    make_venv,
    run,
    wheel_venv,
)

from fxdurable import __version__

pytestmark = pytest.mark.slow


# What each extra makes importable: a module of ours that needs it, and the package it needs.
EXTRA_IMPORTS = {
    "redis": ("fxdurable.stores.redis", "fxdurable.queues.rq", "fxdurable.workers.rq_worker_class"),
    "aws": ("fxdurable.stores.dynamodb", "fxdurable.queues.sqs", "boto3"),
    "lambda": ("fxdurable.aws_lambda.http", "fxdurable.aws_lambda.wake", "mangum"),
    "http": ("fxdurable.http.app", "fxdurable.http.env", "uvicorn"),
    "otel": ("opentelemetry.trace", "fxdurable.runtime.tracing"),
    "mcp": ("mcp.client.stdio", "mcp.client.streamable_http", "fxdurable.tools.mcp"),
    "pydantic-ai": ("pydantic_ai", "fxdurable.adapters.pydantic_ai"),
    "openai-agents": ("agents", "fxdurable.adapters.openai_agents"),
    "langchain": ("langchain.agents", "fxdurable.adapters.langchain"),
}

# A user's program against the public API: tools with each replay policy (one durable, with
# a step), a before_tool hook, the Runtime and session APIs, and the errors users catch.
USER_PROGRAM = '''\
"""Charge, then refund: a user's program checked with mypy --strict."""

import asyncio

import pydantic

import fxdurable as fx


class Charge(pydantic.BaseModel):
    customer: str
    cents: int


@fx.tool(replay="idempotent")
async def charge(inp: Charge, ctx: fx.ToolContext) -> str:
    """Charge a customer, deduplicated downstream on the execution id."""
    return f"charged {inp.customer} {inp.cents} cents ({ctx.execution_id})"


@fx.tool(durable=True)
async def refund(inp: Charge, ctx: fx.ToolContext) -> str:
    """Refund a customer in recorded steps."""
    reference: str = await ctx.step("reference", lambda: f"r-{inp.customer}")
    return await ctx.step("refund", lambda: f"refunded {inp.cents} ({reference})")


@fx.tool(replay="safe")
def balance(inp: Charge, ctx: fx.ToolContext) -> str:
    """Read a balance."""
    ctx.progress("reading")
    return "0"


def review(tool: str, arguments: str) -> str | fx.Ask | None:
    return fx.ask(f"refund {arguments}?") if tool == "refund" else None


script = [fx.reply("", fx.call("charge", customer="c1", cents=500)), fx.reply("Charged.")]
agent = fx.Agent(
    "billing",
    model=fx.ScriptedModel(script),
    tools=[charge, refund, balance],
    durability=fx.Durability(max_attempts=10, timeout_s=3600),
    before_tool=review,
)


async def main() -> int:
    async with fx.Runtime([agent], store="sqlite:///app.db") as rt:
        session: fx.SessionHandle = rt.session("customer-42")
        submission: fx.Submission = await session.submit("Charge c1", request_id="req-1")
        settled: fx.Submission = await session.wait(submission.id, timeout=30)
        if settled.status is not fx.SubmissionStatus.COMPLETED:
            return 1
        try:
            answer: str = await session.run("Again", request_id="req-2", timeout=30)
        except fx.SubmissionFailedError as exc:
            print(f"failed: {exc}")
            return 1
        events: list[fx.EventRecord] = list(await session.events(after=0))
        print(answer, settled.result, len(events))
    try:
        fx.Runtime([agent], store="nope://x")
    except fx.ConfigurationError as exc:
        print(f"refused: {exc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
'''


def _metadata(wheel: Path) -> tuple[set[str], list[tuple[str, str]]]:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        text = zf.read(f"fxdurable-{__version__}.dist-info/METADATA").decode()
    return names, list(Parser().parsestr(text).items())


@pytest.mark.timeout(900)
def test_make_wheel_builds_a_wheel_and_an_sdist_that_twine_passes(tmp_path: Path) -> None:
    dist, build_venv = tmp_path / "dist", tmp_path / "venv-build"
    out = run(
        ["make", "--no-print-directory", "-C", str(REPO), "wheel", f"DIST={dist}",
         f"BUILD_VENV={build_venv}", f"PYTHON={sys.executable}"],
        cwd=tmp_path, timeout=900, what="make wheel",
    )  # fmt: skip
    wheel = dist / f"fxdurable-{__version__}-py3-none-any.whl"
    sdist = dist / f"fxdurable-{__version__}.tar.gz"
    assert wheel.is_file() and sdist.is_file(), sorted(dist.iterdir())
    # make wheel ends with twine check --strict on both (a failed check fails the make).
    assert out.count("PASSED") == 2 and "FAILED" not in out and "WARNING" not in out, out

    names, fields = _metadata(wheel)
    assert f"fxdurable-{__version__}.dist-info/licenses/LICENSE" in names
    meta: dict[str, list[str]] = {}
    for key, value in fields:
        meta.setdefault(key, []).append(value)
    assert meta["License-Expression"] == ["Apache-2.0"] and meta["License-File"] == ["LICENSE"]
    assert meta["Requires-Python"] == [">=3.11"]
    assert meta["Description-Content-Type"] == ["text/markdown"]
    assert meta["Summary"][0].startswith("LLM-agent turns that outlive their processes")
    classifiers = set(meta["Classifier"])
    for wanted in ("Typing :: Typed", "Framework :: AsyncIO", *(
        f"Programming Language :: Python :: 3.{minor}" for minor in (11, 12, 13)
    )):  # fmt: skip
        assert wanted in classifiers, sorted(classifiers)
    urls = dict(u.split(", ", 1) for u in meta["Project-URL"])
    assert urls == {
        "Homepage": "https://github.com/fxdurable/fxdurable",
        "Source": "https://github.com/fxdurable/fxdurable",
        "Issues": "https://github.com/fxdurable/fxdurable/issues",
        "Documentation": "https://fxdurable.github.io/fxdurable",
    }
    assert set(ALL_EXTRAS.split(",")) <= set(meta["Provides-Extra"]), meta["Provides-Extra"]
    assert meta["Keywords"] and meta["Author"]


@pytest.mark.timeout(900)
def test_the_sdist_holds_only_the_package_and_builds_the_same_working_wheel(
    tmp_path: Path,
) -> None:
    sdist = built_sdist()
    top = f"fxdurable-{__version__}"
    with tarfile.open(sdist) as tf:
        members = [m.name for m in tf.getmembers() if m.isfile()]
        tf.extractall(tmp_path, filter="data")
    outside = sorted({m.split("/")[1] for m in members} - {"fxdurable"})
    assert outside == [".gitignore", "LICENSE", "PKG-INFO", "README.md", "pyproject.toml"]
    for junk in ("/.fxd", ".db", "/.venv", "__pycache__", ".pyc", "/tests/"):
        assert not [m for m in members if junk in m], (junk, members)
    assert f"{top}/fxdurable/py.typed" in members

    # A wheel built from the unpacked sdist (as pip does from an index's sdist) ships the
    # same files as the one built from the checkout.
    rebuilt_dir = tmp_path / "rebuilt"
    run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(rebuilt_dir),
         str(tmp_path / top)],
        cwd=tmp_path, timeout=600, what="building a wheel from the sdist",
    )  # fmt: skip
    [rebuilt] = rebuilt_dir.glob("fxdurable-*.whl")
    assert rebuilt.name == built_wheel().name
    assert _metadata(rebuilt) == _metadata(built_wheel())

    venv = make_venv(tmp_path / "venv", str(rebuilt))
    work = tmp_path / "work"
    work.mkdir()
    fxd = str(venv.exe("fxdurable"))
    version = run([fxd, "--version"], cwd=work, timeout=60, what="fxdurable --version")
    assert version.strip() == f"fxdurable {__version__}"
    demo = run([fxd, "demo", "--dir", "D"], cwd=work, timeout=180, what="demo (sdist's wheel)")
    assert "Outcome: completed" in demo, demo


def _source_copy(where: Path) -> Path:
    """This checkout's files as git sees them (tracked, plus new files not ignored), so the
    path and git-URL installs test the working tree, not the last commit."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, check=True, capture_output=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():  # a deleted file is still listed as cached
            (where / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, where / name)
    return where


def _imports(venv_python: Path, modules: tuple[str, ...], cwd: Path) -> None:
    code = "import importlib, sys\nfor m in sys.argv[1:]: importlib.import_module(m)\n"
    run([str(venv_python), "-c", code, *modules], cwd=cwd, timeout=120, what=f"import {modules}")


@pytest.mark.timeout(1200)
def test_a_local_path_a_git_url_and_the_package_name_install_with_extras(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    checkout = _source_copy(tmp_path / "fxdurable")

    # pip install './fxdurable[redis]': a path to a checkout.
    path_venv = make_venv(tmp_path / "venv-path", f"{checkout}[redis]")
    _imports(path_venv.python, EXTRA_IMPORTS["redis"], work)

    # pip install 'fxdurable[http] @ git+file:///...': the docs' git+https form, on a local
    # repository (the network reaches package registries only).
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for step in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "x"]):
        subprocess.run([*git, *step], cwd=checkout, check=True, capture_output=True)
    # The pip of Python 3.11's ensurepip (23.2) refuses a git+file:/// URL (no host) in a
    # "name @ url" requirement, though it takes git+https://github.com/...: a current pip here.
    git_venv = make_venv(tmp_path / "venv-git", "--upgrade", "pip")
    run(
        [str(git_venv.python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
         f"fxdurable[http] @ git+file://{checkout}@main"],
        cwd=tmp_path, timeout=600, what="pip install 'fxdurable[http] @ git+file://...'",
    )  # fmt: skip
    _imports(git_venv.python, EXTRA_IMPORTS["http"], work)

    # pip install 'fxdurable[otel]': the index form, with the built wheel found by name.
    name_venv = make_venv(
        tmp_path / "venv-name", "--find-links", str(built_wheel().parent), "fxdurable[otel]"
    )
    _imports(name_venv.python, EXTRA_IMPORTS["otel"], work)

    for venv in (path_venv, git_venv, name_venv):
        version = run(
            [str(venv.exe("fxdurable")), "--version"], cwd=work, timeout=60, what="--version"
        )
        assert version.strip() == f"fxdurable {__version__}"
        where = run(
            [str(venv.python), "-c", "import fxdurable; print(fxdurable.__file__)"],
            cwd=work, timeout=60, what="where fxdurable is imported from",
        )  # fmt: skip
        assert Path(where.strip()).resolve().is_relative_to(venv.root.resolve()), where


@pytest.mark.timeout(900)
def test_every_extra_imports_its_optional_modules(tmp_path: Path) -> None:
    venv = wheel_venv(ALL_EXTRAS)
    assert set(EXTRA_IMPORTS) == set(ALL_EXTRAS.split(","))
    for modules in EXTRA_IMPORTS.values():
        _imports(venv.python, modules, tmp_path)
    # With the otel extra, the runtime's spans go to OpenTelemetry's API once it is imported.
    code = (
        "import opentelemetry.trace\nfrom fxdurable.runtime import tracing\n"
        "assert tracing._api() is opentelemetry.trace\n"
    )
    run([str(venv.python), "-c", code], cwd=tmp_path, timeout=60, what="otel spans on")
    # And without an extra, the module that needs it says which to install.
    bare = wheel_venv("")
    probe = subprocess.run(
        [str(bare.python), "-c", "import fxdurable.stores.redis"],
        cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert probe.returncode != 0 and "No module named 'redis'" in probe.stderr, probe.stderr


def _mypy_strict(venv_python: Path, *args: str) -> list[str]:
    """mypy of the test environment, checking against the packages of ``venv_python``: with
    ``--python-executable`` it reads installed packages from that interpreter's site-packages
    only (never this checkout's editable install), so the wheel's venv needs no mypy of its
    own, which cost a venv with the wheel's dependencies and mypy installed again (~15 s)."""
    return [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
            "--python-executable", str(venv_python), *args]  # fmt: skip


@pytest.mark.timeout(900)
def test_a_users_program_passes_mypy_strict_against_the_installed_wheel(tmp_path: Path) -> None:
    venv = wheel_venv("")
    project = tmp_path / "project"
    project.mkdir()
    (project / "app.py").write_text(USER_PROGRAM)
    assert len(USER_PROGRAM.splitlines()) <= 80
    out = run(
        _mypy_strict(venv.python, "app.py"),
        cwd=project, timeout=600, what="mypy --strict on the user's program",
    )  # fmt: skip
    assert out.strip().startswith("Success: no issues found in 1 source file"), out
    ran = run([str(venv.python), "app.py"], cwd=project, timeout=120, what="the user's program")
    assert ran.startswith("Charged. Charged. ") and "refused: unknown store URL" in ran, ran

    # The check can fail: a misuse of the API is an error in the installed types, which are
    # the wheel's (-v names the file each module is parsed from).
    (project / "wrong.py").write_text(
        "import fxdurable as fx\n\nfx.Agent('a', model=fx.ScriptedModel([]), tools=['x'])\n"
    )
    wrong = subprocess.run(
        _mypy_strict(venv.python, "-v", "wrong.py"),
        cwd=project, env=clean_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert wrong.returncode == 1 and 'List item 0 has incompatible type "str"' in wrong.stdout, (
        wrong.stdout
    )
    parsed = [x for x in wrong.stderr.splitlines() if x.endswith("__init__.py (fxdurable)")]
    assert len(parsed) == 1 and f"Parsing {venv.root}/" in parsed[0], parsed
