"""``fxdurable --help`` and ``fxdurable demo`` (scripted model, SQLite, local queue) start
without the HTTP stack, a provider client, Redis, RQ or AWS."""

from __future__ import annotations

from pathlib import Path

from tests.test_lazy_imports import optional_modules_loaded


def test_help_loads_nothing_optional() -> None:
    code = (
        "from fxdurable.cli.main import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 0, exc.code\n"
    )
    assert optional_modules_loaded(code) == []


def test_demo_loads_nothing_optional(tmp_path: Path) -> None:
    code = (
        "from fxdurable.cli.main import main\n"
        f"assert main(['demo', '--dir', {str(tmp_path / 'd')!r}]) == 0\n"
    )
    assert optional_modules_loaded(code) == []
