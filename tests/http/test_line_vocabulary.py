"""The chat stream's line vocabulary: every event type has a published line schema, the
schema refuses what is not in the vocabulary, and the HTTP API page's table (docs/http.md)
is the vocabulary.

That every line the server sends validates against the schema is checked by every HTTP test:
``http_lines`` validates each line it reads.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from http_lines import line_of
from pydantic import ValidationError

from fxdurable.core.events import PAYLOADS, WIRE_VERSION, EventType
from fxdurable.http.lines import WIRE_PAYLOADS, line_adapter, markdown_table, wire_type
from fxdurable.http.openapi import openapi_document

HTTP_PAGE = Path(__file__).resolve().parents[2] / "docs" / "http.md"


def _line_schemas() -> tuple[dict[str, Any], dict[str, str]]:
    schemas = openapi_document()["components"]["schemas"]
    return schemas, schemas["Line"]["discriminator"]["mapping"]


@pytest.mark.parametrize("event_type", list(EventType))
def test_every_event_type_has_a_published_line_schema(event_type: EventType) -> None:
    schemas, mapping = _line_schemas()
    ref = mapping[wire_type(event_type)]
    line = schemas[ref.rsplit("/", 1)[1]]
    data_ref = line["properties"]["data"]["$ref"].rsplit("/", 1)[1]
    payload = WIRE_PAYLOADS[wire_type(event_type)]
    assert data_ref == payload.__name__
    if event_type in PAYLOADS and wire_type(event_type) == event_type.value:
        assert payload is PAYLOADS[event_type]


def test_the_document_publishes_the_wire_version_and_only_known_line_types() -> None:
    document = openapi_document()
    assert document["info"]["x-wire-version"] == WIRE_VERSION
    _, mapping = _line_schemas()
    assert set(mapping) == set(WIRE_PAYLOADS)
    assert {"turn_start", "turn_end", "keepalive", "stream_end"} <= set(mapping)
    assert not {"submission.admitted", "submission.completed"} & set(mapping)


def _line(type_: str, data: dict[str, Any], **fields: Any) -> str:
    line = {"cursor": 3, "type": type_, "sessionId": "s", "turnId": "t", "at": 1.5, "data": data}
    return json.dumps({**line, **fields})


PARTIAL = {"round": 0, "text": "hel"}


def test_a_line_outside_the_vocabulary_is_refused() -> None:
    assert line_of(_line("model.partial", PARTIAL))["data"] == PARTIAL
    refused = [
        _line("model.partials", PARTIAL),  # an unknown type
        _line("model.partial", {**PARTIAL, "extra": 1}),  # an unknown field
        _line("model.partial", {"round": "0", "text": "hel"}),  # a field of another type
        _line("model.partial", {"text": "hel"}),  # a missing field
        _line("model.partial", PARTIAL, sessionid="s"),  # an unknown line field
        _line("turn_end", {"submission": "sub-1"}),  # a turn_end without its outcome
    ]
    for raw in refused:
        with pytest.raises(ValidationError):
            line_adapter().validate_json(raw)


def test_a_model_completed_line_stored_before_the_stop_fields_still_validates() -> None:
    old = {
        "round": 0,
        "text": "hi",
        "tools": ["deploy"],
        "input_tokens": 1,
        "output_tokens": 2,
        "cost_usd": None,
    }
    completed = line_adapter().validate_json(_line("model.completed", old)).data
    assert (completed.stop_reason, completed.stop_inferred, completed.truncated) == (
        None,
        False,
        False,
    )


def test_the_docs_table_is_the_vocabulary() -> None:
    found = re.search(
        r"<!-- line-vocabulary:begin[^>]*-->\n(.*?)\n<!-- line-vocabulary:end -->",
        HTTP_PAGE.read_text(),
        flags=re.S,
    )
    assert found, "docs/http.md lost its line vocabulary table"
    assert found.group(1) == markdown_table(), (
        "docs/http.md's line vocabulary differs from fxdurable.http.lines: paste the output of "
        "python -c 'from fxdurable.http.lines import markdown_table; print(markdown_table())'"
    )
    assert f"Wire version {WIRE_VERSION}" in HTTP_PAGE.read_text()
