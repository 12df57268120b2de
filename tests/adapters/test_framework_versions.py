"""The version check every adapter runs before it imports its framework
(``fxdurable/adapters/_version.py``): one table, one message shape, for pydantic-ai, the OpenAI
Agents SDK and LangChain; and ``import fxdurable`` loads none of them."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

import fxdurable as fx
from fxdurable.adapters._version import (
    LANGCHAIN,
    OPENAI_AGENTS,
    PYDANTIC_AI,
    Framework,
    UnsupportedFrameworkError,
)

REPO = Path(__file__).resolve().parents[2]
# (the framework, the module its import would load, a supported release, unsupported ones)
FRAMEWORKS = [
    (PYDANTIC_AI, "pydantic_ai", "2.68.0", ["1.0.0", "2.67.3", "2.69.0", "3.0.0", "unknown"]),
    (OPENAI_AGENTS, "agents", "0.24.0", ["0.23.9", "0.25.0", "1.0.0", "unknown"]),
    (LANGCHAIN, "langchain", "1.5.2", ["0.3.27", "1.4.10", "1.6.0", "2.0.0", "dev"]),
]
IDS = [f[0].adapter for f in FRAMEWORKS]


@pytest.mark.parametrize(("framework", "module", "good", "bad"), FRAMEWORKS, ids=IDS)
def test_an_unsupported_release_fails_with_what_to_install(
    framework: Framework, module: str, good: str, bad: list[str]
) -> None:
    wanted = f"{framework.distribution}{framework.range}"
    for version in bad:
        with pytest.raises(UnsupportedFrameworkError) as raised:
            framework.check(version)
        assert str(raised.value) == (
            f"fxdurable.adapters.{framework.adapter} supports {wanted} (the releases it was "
            f"tested with); {version} is installed: pip install '{wanted}' "
            f"(or 'fxdurable[{framework.extra}]')"
        )
        assert isinstance(raised.value, fx.ConfigurationError)
    assert framework.check(good) == good
    framework.check()  # the test venv's own release is supported (this raises otherwise)


def test_a_missing_framework_names_the_extra() -> None:
    absent = dataclasses.replace(LANGCHAIN, distribution="fxdurable-no-such-framework")
    with pytest.raises(UnsupportedFrameworkError) as raised:
        absent.check()
    assert str(raised.value) == (
        "fxdurable.adapters.langchain needs fxdurable-no-such-framework>=1.5,<1.6, which is not "
        "installed: pip install 'fxdurable[langchain]'"
    )


def test_each_import_checks_the_release_first_and_import_fxdurable_loads_no_framework(
    tmp_path: Path,
) -> None:
    # A real distribution of an old release of each framework, first on the path: the
    # installed metadata is what the check reads, and the framework is never imported.
    for framework, _, _, bad in FRAMEWORKS:
        dist = tmp_path / f"{framework.distribution.replace('-', '_')}-{bad[0]}.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {framework.distribution}\nVersion: {bad[0]}\n"
        )
    modules = [m for _, m, _, _ in FRAMEWORKS]
    code = (
        "import sys, fxdurable; fxdurable.Runtime\n"
        f"modules = {modules!r}\n"
        "loaded = lambda: sorted(m for m in sys.modules if m.split('.')[0] in modules)\n"
        "print(loaded())\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        f"for adapter in {[f[0].adapter for f in FRAMEWORKS]!r}:\n"
        "    try:\n"
        "        __import__('fxdurable.adapters.' + adapter)\n"
        "    except Exception as exc:\n"
        "        print(type(exc).__name__, exc)\n"
        "print(loaded())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    before, *errors, after = done.stdout.strip().splitlines()
    assert before == "[]" and after == "[]", done.stdout
    assert len(errors) == len(FRAMEWORKS), done.stdout
    for (framework, _, _, bad), error in zip(FRAMEWORKS, errors, strict=True):
        assert error.startswith(
            f"UnsupportedFrameworkError fxdurable.adapters.{framework.adapter} supports"
        ), error
        assert f"{bad[0]} is installed" in error, error
