"""``import fxdurable`` loads none of the runtime; reading a public name loads no model
provider, HTTP stack, Redis, RQ or AWS client. Those load when a URL, a model or a command asks
for them (``fxdurable/core/lazy.py``). Checked on ``sys.modules`` in a fresh interpreter, never
on time: the bench (``bench/startup.py``) reports the time.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import fxdurable

# Modules that only a provider model, the HTTP API, a Redis/RQ URL, an AWS backend or tracing
# (an application that uses OpenTelemetry, or FXD_OTEL=1) needs.
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
    "fxdurable.queues.sqs",
    "fxdurable.workers.rq_worker",
    "redis",
    "rq",
    "boto3",
    "botocore",
    "opentelemetry",
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


def test_boto3_loads_when_an_sqs_queue_is_opened_and_not_before() -> None:
    opened = "from fxdurable.backends import open_queue\nopen_queue('local')\n"
    assert optional_modules_loaded(opened) == []
    sqs = opened + "open_queue('sqs://wakes?region=us-east-1')  # connects to nothing yet\n"
    assert optional_modules_loaded(sqs) == ["boto3", "botocore", "fxdurable.queues.sqs"]


def test_a_worker_loads_no_model_client_until_a_provider_is_used() -> None:
    """The warm context a no-fork worker and each work horse build closes model clients
    only if some provider loaded them: a worker on scripted agents never imports httpx."""
    loaded = optional_modules_loaded("import fxdurable.workers.warm\n")
    assert "httpx" not in loaded
    assert "fxdurable.runtime.models.http" not in loaded


def test_dir_lists_every_public_name_before_any_is_read() -> None:
    assert set(fxdurable.__all__) <= set(dir(fxdurable))


def test_a_name_outside_the_table_is_an_attribute_error() -> None:
    try:
        fxdurable.NoSuchName  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchName" in str(exc)
    else:  # pragma: no cover - the message is the point
        raise AssertionError("fxdurable.NoSuchName resolved")


@pytest.mark.parametrize("package", ["fxdurable", "fxdurable.runtime.models", "fxdurable.tools"])
def test_type_checkers_see_the_names_the_table_resolves(package: str) -> None:
    """The ``if TYPE_CHECKING:`` imports and the lazy table name the same things from the same
    modules, and each name resolves to what its module defines."""
    module = importlib.import_module(package)
    tree = ast.parse(Path(str(module.__file__)).read_text())
    static: set[tuple[str, str]] = set()
    table: set[tuple[str, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom) and stmt.module is not None
                static |= {(stmt.module, alias.name) for alias in stmt.names}
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                assert isinstance(key, ast.Constant) and isinstance(value, ast.Tuple)
                table |= {(key.value, ast.literal_eval(name)) for name in value.elts}
    assert static == table
    for source, name in table:
        assert getattr(module, name) is getattr(importlib.import_module(source), name)
