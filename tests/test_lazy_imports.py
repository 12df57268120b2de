"""``import fxdurable`` loads none of the runtime; reading a public name loads no model
provider, HTTP stack, Redis, RQ or AWS client. Those load when a URL, a model or a command asks
for them (``fxdurable/core/lazy.py``). Checked on ``sys.modules`` in a fresh interpreter, never
on time: the bench (``bench/startup.py``) reports the time.
"""

from __future__ import annotations

import json
import subprocess
import sys

import fxdurable

# Modules that only a provider model, the HTTP API, a Redis/RQ URL or an AWS backend needs.
OPTIONAL = (
    "fxdurable.runtime.models.openai",
    "fxdurable.runtime.models.anthropic",
    "fxdurable.runtime.models.http",
    "httpx",
    "fxdurable.http",
    "starlette",
    "uvicorn",
    "fxdurable.stores.redis",
    "fxdurable.queues.rq",
    "fxdurable.workers.rq_worker",
    "redis",
    "rq",
    "boto3",
    "botocore",
)


def optional_modules_loaded(code: str) -> list[str]:
    """The ``OPTIONAL`` modules loaded after running ``code`` in a fresh interpreter (whatever
    ``code`` prints goes to stderr, so stdout carries the answer alone)."""
    script = (
        "import json, sys\n"
        "_stdout, sys.stdout = sys.stdout, sys.stderr\n"
        f"{code}\n"
        f"loaded = sorted(m for m in {OPTIONAL!r} if m in sys.modules)\n"
        "_stdout.write(json.dumps(loaded))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    loaded: list[str] = json.loads(proc.stdout)
    return loaded


def test_import_fxdurable_loads_nothing_optional_and_every_public_name_resolves() -> None:
    code = (
        "import fxdurable\n"
        "assert 'fxdurable.runtime' not in sys.modules, 'import fxdurable loaded the runtime'\n"
        "for name in fxdurable.__all__:\n"
        "    assert getattr(fxdurable, name) is not None, name\n"
    )
    assert optional_modules_loaded(code) == []


def test_dir_lists_every_public_name_before_any_is_read() -> None:
    assert set(fxdurable.__all__) <= set(dir(fxdurable))


def test_a_name_outside_the_table_is_an_attribute_error() -> None:
    try:
        fxdurable.NoSuchName  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchName" in str(exc)
    else:  # pragma: no cover - the message is the point
        raise AssertionError("fxdurable.NoSuchName resolved")
