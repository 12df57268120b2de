"""Typed final answers: ``Agent(output_type=...)`` (docs/typed-output.md).

The final answer is a JSON value validated against ``output_type`` (a pydantic model, or any
type a pydantic ``TypeAdapter`` validates: ``int``, ``list[str]``, a ``TypedDict``, ...). The
request carries its JSON schema as an :class:`~fxdurable.runtime.models.base.OutputFormat`,
which each provider sends as its native structured output where it has one. A type whose
schema is not a JSON object (``int``, ``list[str]``) is asked for wrapped as ``{"value": ...}``,
since the providers' structured outputs take an object at the top.

Validation is pure: the same answer text gives the same verdict, so a crash before the verdict
is recorded just reaches it again. A rejection is a recorded step (a user message telling the
model what was wrong, ``Journal.reject_output``); past ``output_retries`` of them the turn fails
with ``output_invalid``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, TypeAlias

import pydantic

from fxdurable.errors import ConfigurationError
from fxdurable.runtime.models.base import REJECTED_ANSWER_HEADING, OutputFormat

__all__ = [
    "Accepted",
    "OutputExhausted",
    "OutputSpec",
    "Rejected",
    "Verdict",
    "judge_answer",
    "strict_compatible",
]

_WRAPPER_KEY = "value"
# A reply that fences its JSON (```json ... ```), as models without native structured output do.
_FENCE = re.compile(r"^```[a-zA-Z0-9_-]*\s*\n?(.*?)\n?```$", re.DOTALL)
_MAX_ERRORS_SHOWN = 8


@dataclass(frozen=True, slots=True)
class Accepted:
    """The answer validated: ``output`` is the value as JSON text (what is stored); None
    for an agent without ``output_type``."""

    output: str | None


@dataclass(frozen=True, slots=True)
class Rejected:
    """The answer did not validate: ``message`` is what the model is told."""

    message: str


@dataclass(frozen=True, slots=True)
class OutputExhausted:
    """The answer did not validate and the turn's ``output_retries`` are spent."""

    message: str


Verdict: TypeAlias = Accepted | Rejected


def judge_answer(
    spec: OutputSpec | None, text: str, *, rejections: int, retries: int
) -> Accepted | Rejected | OutputExhausted:
    """What the turn does with its final answer: settle it (with the validated output, or
    none for an untyped agent), reject it, or fail (``rejections`` of ``retries`` spent)."""
    if spec is None:
        return Accepted(None)
    verdict = spec.check(text)
    if isinstance(verdict, Rejected) and rejections >= retries:
        why = verdict.message.split("\n", 1)[0]
        return OutputExhausted(
            f"the model's final answer is not a valid {spec.format.name} after {rejections} "
            f"retries (output_retries={retries}): {why}"
        )
    return verdict


class OutputSpec:
    """How an agent's final answer is asked for, validated, stored and read back."""

    def __init__(self, output_type: Any, *, name: str | None = None) -> None:
        try:
            self._adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(output_type)
            schema = self._adapter.json_schema()
        except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError) as exc:
            raise ConfigurationError(
                f"output_type {output_type!r} cannot be validated by pydantic: {exc}"
            ) from exc
        self.type = output_type
        self.wrapped = schema.get("type") != "object"
        if self.wrapped:
            defs = schema.pop("$defs", None)
            schema = {
                "type": "object",
                "properties": {_WRAPPER_KEY: schema},
                "required": [_WRAPPER_KEY],
                "additionalProperties": False,
            }
            if defs:
                schema["$defs"] = defs
        title = name or getattr(output_type, "__name__", None) or "answer"
        self.format = OutputFormat(
            name=_format_name(str(title)), schema=schema, strict=strict_compatible(schema)
        )

    def check(self, text: str) -> Verdict:
        """The verdict on a final answer's text (pure: the same text, the same verdict)."""
        try:
            data = json.loads(_unfenced(text))
        except ValueError as exc:
            return Rejected(self._rejection(f"it is not JSON ({exc})"))
        if self.wrapped:
            if not isinstance(data, dict) or _WRAPPER_KEY not in data:
                return Rejected(self._rejection(f'it is not an object with a "{_WRAPPER_KEY}"'))
            data = data[_WRAPPER_KEY]
        try:
            value = self._adapter.validate_python(data)
        except pydantic.ValidationError as exc:
            return Rejected(self._rejection(_describe(exc)))
        return Accepted(self.dump(value))

    def dump(self, value: Any) -> str:
        return self._adapter.dump_json(value).decode()

    def load(self, output: str) -> Any:
        """A stored output (JSON text) as a value of the type."""
        return self._adapter.validate_json(output)

    def _rejection(self, why: str) -> str:
        schema = json.dumps(self.format.schema, separators=(",", ":"), sort_keys=True)
        return (
            f"{REJECTED_ANSWER_HEADING}: {why}. Answer again with only a JSON value that "
            f"matches this JSON schema, no other text:\n{schema}"
        )


def strict_compatible(schema: dict[str, Any]) -> bool:
    """Whether ``schema`` meets the providers' strict mode: every object closed
    (``additionalProperties: false``) with every property required. A schema that does not
    is sent non-strict (OpenAI) or described in the instructions (Anthropic), and the answer
    is validated here either way."""
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        if node.get("type") == "object" or "properties" in node:
            properties = node.get("properties") or {}
            if node.get("additionalProperties") is not False:
                return False
            if set(node.get("required") or ()) != set(properties):
                return False
        stack.extend(node.values())
    return True


def _unfenced(text: str) -> str:
    stripped = text.strip()
    fenced = _FENCE.match(stripped)
    return fenced.group(1).strip() if fenced else stripped


def _describe(exc: pydantic.ValidationError) -> str:
    errors = exc.errors(include_url=False)
    lines = [
        f"{'.'.join(str(part) for part in error['loc']) or '(the value)'}: {error['msg']}"
        for error in errors[:_MAX_ERRORS_SHOWN]
    ]
    more = len(errors) - len(lines)
    if more > 0:
        lines.append(f"... and {more} more")
    return "it does not match the schema (" + "; ".join(lines) + ")"


def _format_name(title: str) -> str:
    # OpenAI: ^[a-zA-Z0-9_-]{1,64}$
    return re.sub(r"[^A-Za-z0-9_-]", "_", title)[:64] or "answer"
