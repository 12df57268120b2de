"""Fixtures of the HTTP tests: ``served`` makes real ``fxdurable serve`` subprocesses
(``http_server.py``) and stops every one of them when the test ends."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:  # whatever pytest's import mode, the tests import http_server
    sys.path.insert(0, HERE)

from http_server import ServedApp  # noqa: E402


def _fresh(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Callable[..., ServedApp]]:
    apps: list[ServedApp] = []

    def make(**kwargs: Any) -> ServedApp:
        app = ServedApp(_fresh(tmp_path / f"app{len(apps)}"), **kwargs)
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.kill()
