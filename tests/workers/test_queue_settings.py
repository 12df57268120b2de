"""The queue workers' settings: each queue's own names and limits, and the Postgres worker's
old ``FXD_SQS_`` names still read, with a warning, until renamed."""

from __future__ import annotations

import logging

import pytest

from fxdurable.errors import ConfigurationError
from fxdurable.workers.postgres_worker import POSTGRES
from fxdurable.workers.queue_settings import QueueWorkerSettings

NAMES = ("WAIT_S", "VISIBILITY_S", "JOB_TIMEOUT_S")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for prefix in ("FXD_SQS_", "FXD_PG_"):
        for name in NAMES:
            monkeypatch.delenv(prefix + name, raising=False)


def test_the_postgres_worker_reads_its_own_names_within_its_own_limits(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("FXD_PG_WAIT_S", "600")  # past SQS's 20 s: a safety poll may be long
    monkeypatch.setenv("FXD_PG_VISIBILITY_S", "7")
    with caplog.at_level(logging.WARNING):
        settings = QueueWorkerSettings.from_env(POSTGRES.limits, concurrency=4)
    assert settings == QueueWorkerSettings(
        wait_s=600, visibility_s=7, job_timeout_s=900.0, concurrency=4
    )
    assert caplog.records == []
    monkeypatch.setenv("FXD_PG_WAIT_S", "3601")
    with pytest.raises(ConfigurationError, match="FXD_PG_WAIT_S must be 0 to 3600"):
        QueueWorkerSettings.from_env(POSTGRES.limits)


def test_an_old_sqs_name_is_read_with_a_warning_until_its_new_name_is_set(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("FXD_SQS_VISIBILITY_S", "12")
    with caplog.at_level(logging.WARNING, logger="fxdurable.worker"):
        assert QueueWorkerSettings.from_env(POSTGRES.limits).visibility_s == 12
    assert [r.getMessage() for r in caplog.records] == [
        "FXD_SQS_VISIBILITY_S is deprecated for this worker: set FXD_PG_VISIBILITY_S instead"
    ]
    caplog.clear()
    monkeypatch.setenv("FXD_PG_VISIBILITY_S", "5")
    with caplog.at_level(logging.WARNING, logger="fxdurable.worker"):
        assert QueueWorkerSettings.from_env(POSTGRES.limits).visibility_s == 5
    assert [r.getMessage() for r in caplog.records] == [
        "FXD_SQS_VISIBILITY_S is ignored: FXD_PG_VISIBILITY_S is set"
    ]
    monkeypatch.setenv("FXD_SQS_JOB_TIMEOUT_S", "soon")
    with pytest.raises(ConfigurationError, match="FXD_SQS_JOB_TIMEOUT_S must be a number"):
        QueueWorkerSettings.from_env(POSTGRES.limits)
