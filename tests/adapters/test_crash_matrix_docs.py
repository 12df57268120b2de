"""docs/frameworks/crash-matrix.md's table is the crash matrix the adapter tests run
(``frameworks.markdown_table``: every adapter on embedded SQLite, pydantic-ai on every backend,
``frameworks.SPREAD`` for the others on the workers), and the worker tests run ``SPREAD``."""

from __future__ import annotations

import re

import pytest
from frameworks import FRAMEWORKS, FULL_ENV, POINTS, SPREAD, markdown_table, spread
from pydai_checks import MATRIX, REPO

PAGE = REPO / "docs" / "frameworks" / "crash-matrix.md"


def test_the_docs_table_is_the_matrix_the_tests_run() -> None:
    found = re.search(
        r"<!-- crash-matrix:begin[^>]*-->\n(.*?)\n<!-- crash-matrix:end -->",
        PAGE.read_text(),
        flags=re.S,
    )
    assert found, f"{PAGE.relative_to(REPO)} lost its crash matrix table"
    assert found.group(1) == markdown_table(MATRIX), (
        f"{PAGE.relative_to(REPO)}'s table differs from tests/adapters/frameworks.py: paste the "
        'output of python -c \'import sys; sys.path[:0] = ["tests/adapters"]; from frameworks '
        "import markdown_table; from pydai_checks import MATRIX; print(markdown_table(MATRIX))'"
    )


def test_on_the_queues_each_adapter_meets_each_point_once_and_each_point_is_met() -> None:
    # The Latin square the page describes: per adapter, RQ + Redis and SQS + DynamoDB split
    # the four points; per queue, the adapters beyond pydantic-ai meet all four.
    for fw in FRAMEWORKS[1:]:
        met = [*SPREAD["rq"][fw], *SPREAD["sqs"][fw]]
        assert sorted(met) == sorted(POINTS), (fw, met)
    for queue in ("rq", "sqs"):
        assert set().union(*SPREAD[queue].values()) == set(POINTS), queue
    assert all(len(points) == 1 for points in SPREAD["rq-sqlite"].values())


def test_the_full_product_is_every_other_adapter_at_every_point_and_a_typo_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(FULL_ENV, "full")
    for queue in SPREAD:
        cases = {(fw, point) for fw, point, *_ in spread(queue, MATRIX)}
        assert cases == {(fw, m[0]) for fw in FRAMEWORKS[1:] for m in MATRIX}, queue
    monkeypatch.setenv(FULL_ENV, "ful")
    with pytest.raises(ValueError, match=FULL_ENV):
        spread("rq", MATRIX)
    monkeypatch.delenv(FULL_ENV)
    assert len(spread("rq", MATRIX)) == sum(len(p) for p in SPREAD["rq"].values())
