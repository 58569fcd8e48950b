"""A server tool's run: a recorded DBOS step, so an approved tool runs once.

A tool's own failure (invalid arguments, an exception it raised, a result that is not JSON)
is a failed tool result the model reads and may recover from, never a failed turn.
"""

from __future__ import annotations

import inspect
import json
from typing import Any

from dbos import DBOS
from pydantic import BaseModel, ValidationError

from .. import names
from .._context import current
from ..records import ServerToolResult

__all__ = ["run_server_tool"]


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    json.dumps(value)  # fail here, not in the checkpoint, on a non-JSON result
    return value


@DBOS.step(name=names.SERVER_TOOL_STEP)
async def run_server_tool(
    agent_type: str, tool_name: str, tool_input: dict[str, Any]
) -> ServerToolResult:
    """Run a server tool; a tool's own failure is a failed tool result, not a failed turn."""
    tool = current().registry.get(agent_type).tool(tool_name)
    if tool is None or tool.function is None:
        return {
            "ok": False,
            "error": f"Unknown server tool {tool_name!r}",
            "errorCode": "tool_execution_failed",
        }
    try:
        args = tool.input_model.model_validate(tool_input)
        value = tool.function(args)
        if inspect.isawaitable(value):
            value = await value
        return {"ok": True, "result": _jsonable(value)}
    except ValidationError as exc:
        return {
            "ok": False,
            "error": f"Invalid arguments: {exc.errors(include_url=False)}",
            "errorCode": "validation_failed",
        }
    except Exception as exc:  # the model reads the failure and may recover
        return {
            "ok": False,
            "error": f"{type(exc).__name__}: {exc}",
            "errorCode": "tool_execution_failed",
        }
