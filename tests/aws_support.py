"""AWS for tests: one moto server (a real HTTP endpoint boto3 talks to) per test run.

Credentials and region are dummies passed to boto3 explicitly (:func:`aws_session`), so
nothing here reads or writes the process's AWS environment, and no test can reach real AWS.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from redis_support import unavailable

__all__ = ["REGION", "aws_environment", "aws_session", "moto_running", "use_aws_environment"]

REGION = "us-east-1"


def aws_session() -> Any:
    """A ``boto3.Session`` with dummy credentials, for clients of the moto server."""
    import boto3

    return boto3.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
    )


def aws_environment(tmp_path: Path) -> dict[str, str]:
    """Variables under which boto3's own chain finds the dummy credentials and no profile
    of the machine's: for code that opens clients from a URL (``open_queue``, a CLI)."""
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
    }


def use_aws_environment(monkeypatch: Any, tmp_path: Path) -> None:
    """:func:`aws_environment` in this process's environment for the length of a test (a
    ``pytest.MonkeyPatch``), without the machine's ``AWS_PROFILE`` or session token: for a
    test that opens a store from its URL, and the processes it starts, which inherit it."""
    for key, value in aws_environment(tmp_path).items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)


@contextlib.contextmanager
def moto_running(
    directory: Path, timeout_s: float = 20.0, *, serial: bool = False
) -> Iterator[str]:
    """``python -m moto.server`` on 127.0.0.1 and a free port, its output in ``moto.log``;
    yields its endpoint URL. Skips (fails in CI) when it does not start. ``serial``: one
    request at a time (bench/moto_server.py says why)."""
    from bench.moto_server import moto_server

    with contextlib.ExitStack() as stack:
        try:
            endpoint_url = stack.enter_context(moto_server(directory, timeout_s, serial=serial))
        except RuntimeError as exc:
            unavailable(f"moto server would not start: {exc}", "the AWS tests")
        yield endpoint_url
