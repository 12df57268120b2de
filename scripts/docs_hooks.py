"""MkDocs hooks (mkdocs.yml ``hooks:``): the OpenAPI page is written from the document the
server serves (``fxdurable.http.openapi.openapi_document``) at build time, so the site cannot
describe another API than the code's; the document itself is published beside it as
``openapi.json``."""

from __future__ import annotations

import json
import re
from typing import Any

from mkdocs.structure.files import File, Files

from fxdurable.http.openapi import openapi_document

MARKER = "<!-- openapi:document -->"
# The docstrings cross-reference in Sphinx's roles (:class:`Workspace`, :mod:`~x.y`), which
# mkdocstrings renders as the role's text before the code: keep the code, drop the role.
_SPHINX_ROLE = re.compile(r":(?:attr|class|data|exc|func|meth|mod|obj):<code>~?")
_METHODS = ("get", "post", "put", "patch", "delete")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _schema_name(schema: dict[str, Any]) -> str:
    ref = schema.get("$ref", "")
    if ref:
        name = ref.rsplit("/", 1)[-1]
        return f"[`{name}`](#{name.lower()})"
    return f"`{json.dumps(schema)}`"


def _content(body: dict[str, Any]) -> str:
    return ", ".join(
        f"{_schema_name(media['schema'])} (`{kind}`)"
        for kind, media in body.get("content", {}).items()
    )


def _operation(path: str, method: str, op: dict[str, Any]) -> list[str]:
    out = [f"### `{method.upper()} {path}`", "", op.get("summary", "") + "."]
    if op.get("description"):
        out += ["", op["description"]]
    out += ["", "Authentication: " + ("bearer token" if op.get("security") else "none") + "."]
    params = op.get("parameters", [])
    if params:
        out += ["", "| parameter | in | required | schema | description |", "|---|---|---|---|---|"]
        for p in params:
            out.append(
                f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} | "
                f"`{_cell(json.dumps(p.get('schema', {})))}` | {_cell(p.get('description', ''))} |"
            )
    if "requestBody" in op:
        out += ["", "Body: " + _content(op["requestBody"]) + "."]
    out += ["", "| status | meaning | body |", "|---|---|---|"]
    for status, reply in op.get("responses", {}).items():
        out.append(f"| {status} | {_cell(reply.get('description', ''))} | {_content(reply)} |")
    return [*out, ""]


def render(document: dict[str, Any]) -> str:
    """The document as Markdown: each operation, then each schema as JSON Schema."""
    info = document["info"]
    out = [
        f"OpenAPI {document['openapi']}, API version {info['version']}, "
        f"wire version {info['x-wire-version']}. {info['description']}",
        "",
        "The document as JSON: [openapi.json](openapi.json) (a running server serves the same "
        "at `GET /openapi.json`).",
        "",
        "## Operations",
        "",
    ]
    for path, item in document["paths"].items():
        for method in _METHODS:
            if method in item:
                out += _operation(path, method, item[method])
    out += ["## Schemas", ""]
    for name, schema in sorted(document["components"]["schemas"].items()):
        out += [
            f"### {name}",
            "",
            "```json",
            json.dumps(schema, indent=2, sort_keys=True),
            "```",
            "",
        ]
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, render(openapi_document()))
    return markdown


def on_files(files: Files, config: Any, **_: Any) -> Files:
    """Publishes ``openapi.json`` beside the page, as a file of the site (links to it check)."""
    document = json.dumps(openapi_document(), indent=2) + "\n"
    files.append(File.generated(config, "openapi.json", content=document))
    return files


def on_page_content(html: str, page: Any, **_: Any) -> str:
    return _SPHINX_ROLE.sub("<code>", html)
