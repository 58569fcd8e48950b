"""What the AG-UI routes declare in the OpenAPI document.

The request body is the ``ag-ui-protocol`` package's ``RunAgentInput`` schema (``threadId``
under our id rule), inlined. Its unions are tagged (a message's ``role``, a content part's
``type``); the document keeps them as ``oneOf`` with the tag required in each branch, which is
what validation requires: the model's own ``discriminator`` names ``$defs`` entries an OpenAPI
document does not have, and its schema leaves the tag optional (it has a default).
"""

from __future__ import annotations

from typing import Any

from ag_ui.core import Tool
from starlette.responses import StreamingResponse

from .agui_input import AguiRunInput
from .openapi import (
    AUTH_RESPONSES,
    BODY_RESPONSES,
    error_response_doc,
    event_stream_doc,
    inline_schema,
)

__all__ = ["RUN_DOC", "TOOLS_DOC"]


def _tagged(node: Any) -> Any:
    """``node`` with every discriminated ``oneOf`` made plain: the tag required per branch."""
    if isinstance(node, list):
        return [_tagged(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: _tagged(v) for k, v in node.items() if k != "discriminator"}
    tag = node.get("discriminator", {}).get("propertyName")
    if tag and isinstance(out.get("oneOf"), list):
        for branch in out["oneOf"]:
            if isinstance(branch, dict) and tag in branch.get("properties", {}):
                branch["required"] = sorted({*branch.get("required", []), tag})
    return out


def _body_doc() -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": _tagged(inline_schema(AguiRunInput))}},
        }
    }


RUN_DOC: dict[str, Any] = {
    "summary": "Run an agent (AG-UI 1.0): a message, tool results or resume entries",
    "description": "The body is AG-UI's `RunAgentInput`; `threadId` is the session. The answer "
    "is an AG-UI event stream: `RUN_STARTED` first, then the run's events, then "
    "`RUN_FINISHED` (outcome `success`, `interrupt` or `cancelled`) or `RUN_ERROR` (our error "
    "code). A refused run (a stale or repeated resume, an invalid tool result, a busy thread, "
    "an unknown client tool) is `RUN_STARTED` + `RUN_ERROR`, and nothing of it is stored. "
    "See docs/agui.md.",
    "response_class": StreamingResponse,
    "responses": {
        200: event_stream_doc("An AG-UI event stream (`data: <event JSON>`).", "An AG-UI event."),
        **BODY_RESPONSES,
        404: error_response_doc("`framework_agent_not_found`: no such agent type."),
        429: error_response_doc(
            "`rate_limited` (retryable, `Retry-After`): too many tool answers for the thread."
        ),
        503: error_response_doc(
            "`store_unavailable` (retryable, `Retry-After`): the database is unreachable."
        ),
    },
    "openapi_extra": _body_doc(),
}

TOOLS_DOC: dict[str, Any] = {
    "summary": "The agent's client tools, as AG-UI tool definitions",
    "description": "What a client declares as its frontend tools (`RunAgentInput.tools`): the "
    'agent\'s tools with `execute="client"`, with their input schemas as `parameters`.',
    "response_model": list[Tool],
    "responses": {
        **AUTH_RESPONSES,
        400: error_response_doc("`validation_error`: an invalid agent type."),
        404: error_response_doc("`framework_agent_not_found`: no such agent type."),
    },
}
