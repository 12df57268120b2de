"""Receipt mode's settings (the Lambda adapter's): how they are read and what is refused."""

from __future__ import annotations

import pytest

from fxdurable.errors import ConfigurationError
from fxdurable.http.settings import HttpSettings


def test_receipt_mode_and_its_long_poll_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert HttpSettings.from_env().mode == "stream"
    monkeypatch.setenv("FXD_HTTP_MODE", "receipt")
    monkeypatch.setenv("FXD_HTTP_LONG_POLL_S", "12.5")
    settings = HttpSettings.from_env()
    assert (settings.mode, settings.long_poll_s) == ("receipt", 12.5)


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("FXD_HTTP_MODE", "sse", "FXD_HTTP_MODE is 'stream' or 'receipt'"),
        ("FXD_HTTP_LONG_POLL_S", "29", "would outlast API Gateway's 30 s limit"),
        ("FXD_HTTP_LONG_POLL_S", "-1", "long_poll_s must be positive"),
    ],
)
def test_a_bad_receipt_setting_says_what_to_fix(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, says: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError, match=says):
        HttpSettings.from_env()
