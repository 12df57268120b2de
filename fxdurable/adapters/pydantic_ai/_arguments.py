"""What fxdurable's tools over pydantic-ai's share: a call's arguments as they carry them
(runtime only), and a tool shown, validated and compared as pydantic-ai defined it."""

from __future__ import annotations

from typing import Any

import pydantic
from pydantic_ai.toolsets import ToolsetTool
from pydantic_core import ValidationError

from fxdurable.errors import ToolInputError
from fxdurable.runtime.decide import canonical_arguments
from fxdurable.runtime.tools import Tool

__all__ = ["DefinedTool", "ToolArguments", "invalid"]


class ToolArguments(pydantic.BaseModel):
    """A call's arguments as pydantic-ai's validator returned them (runtime only)."""

    model_config = pydantic.ConfigDict(arbitrary_types_allowed=True, frozen=True)
    values: dict[str, Any]


def invalid(tool: str, exc: ValidationError) -> ToolInputError:
    """pydantic-ai's validation error as the tool error the model reads."""
    problems = "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or 'input'}: {err['msg']}" for err in exc.errors()
    )
    return ToolInputError(f"invalid arguments for {tool}: {problems}")


class DefinedTool(Tool):
    """An fxdurable :class:`Tool` over a pydantic-ai tool definition (``definition``, set by
    the subclass): its schema is pydantic-ai's, its arguments are checked by pydantic-ai's
    validator."""

    __slots__ = ("definition",)
    definition: ToolsetTool[Any]

    def json_schema(self) -> dict[str, Any]:
        return dict(self.definition.tool_def.parameters_json_schema)

    def parse(self, arguments: str) -> pydantic.BaseModel:
        try:
            values = self.definition.args_validator.validate_json(arguments or "{}")
        except ValidationError as exc:
            raise invalid(self.name, exc) from exc
        if not isinstance(values, dict):  # an external tool's validator takes any JSON
            raise ToolInputError(f"invalid arguments for {self.name}: not a JSON object")
        return ToolArguments(values=dict(values))

    def canonical_input(self, arguments: str) -> str:
        # The arguments' JSON with sorted keys: pydantic-ai's validated values may hold
        # objects that do not compare as JSON (models, dataclasses).
        return canonical_arguments(arguments)
