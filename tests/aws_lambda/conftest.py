"""Fixtures of the Lambda tests: a queue of the test's own on the moto server, and the
environment the SAM template gives the functions (dummy credentials, no real AWS)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:  # whatever pytest's import mode, the tests import lambda_support
    sys.path.insert(0, HERE)

from lambda_support import LambdaWorld  # noqa: E402


@pytest.fixture
def lambda_world(
    moto_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[LambdaWorld]:
    world = LambdaWorld.create(moto_server, tmp_path)
    for name, value in world.env().items():
        monkeypatch.setenv(name, value)
    yield world
    world.close()
