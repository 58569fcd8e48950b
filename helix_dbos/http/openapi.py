"""What the routes declare in the OpenAPI document: the typed error answers and raw bodies.

The routes parse their bodies themselves (``body.py``), so FastAPI cannot derive the request
schemas: ``raw_json_body_doc`` declares them, with every nested model inlined (a ``$ref`` into
the model's own ``$defs`` would dangle in the OpenAPI document, which keeps schemas under
``components``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from .schemas import ErrorBody

__all__ = [
    "AUTH_RESPONSES",
    "BODY_RESPONSES",
    "QUERY_RESPONSES",
    "error_response_doc",
    "raw_json_body_doc",
]


def error_response_doc(description: str, model: type[BaseModel] = ErrorBody) -> dict[str, Any]:
    """One documented refusal."""
    return {"model": model, "description": description}


AUTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: error_response_doc(
        "`unauthorized`: the authenticate hook refused (missing/invalid/expired token)."
    ),
    403: error_response_doc("`forbidden`: authenticated, but not for this session."),
    500: error_response_doc(
        "`framework_internal_error`: an unexpected failure (nothing about it is revealed)."
    ),
}
BODY_RESPONSES: dict[int | str, dict[str, Any]] = {
    **AUTH_RESPONSES,
    400: error_response_doc(
        "`validation_error`: not JSON, nested too deeply, or not a valid body "
        "(fixed message; `details` only with verbose validation errors)."
    ),
    411: error_response_doc(
        "`validation_error` with `cause: length_required`: Transfer-Encoding without "
        "Content-Length."
    ),
    413: error_response_doc(
        "`validation_payload_too_large` with `cause: request_body`: the body is over "
        "the request-body guard (`limitBytes`, `sizeBytes`)."
    ),
    415: error_response_doc(
        "`validation_error` with `cause: content_type`: the body is not `application/json`."
    ),
}
QUERY_RESPONSES: dict[int | str, dict[str, Any]] = {
    **AUTH_RESPONSES,
    400: error_response_doc("`validation_error`: a missing or invalid query parameter or header."),
    404: error_response_doc("`state_not_found`: no such session."),
}


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            target = _inline(defs[ref.removeprefix("#/$defs/")], defs)
            rest = {k: _inline(v, defs) for k, v in node.items() if k != "$ref"}
            return {**target, **rest}
        return {k: _inline(v, defs) for k, v in node.items() if k != "$defs"}
    if isinstance(node, list):
        return [_inline(item, defs) for item in node]
    return node


def inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema (wire names) with its ``$defs`` inlined (no recursive models)."""
    schema = model.model_json_schema(by_alias=True)
    inlined: dict[str, Any] = _inline(schema, schema.get("$defs", {}))
    return inlined


def raw_json_body_doc(model: type[BaseModel]) -> dict[str, Any]:
    """OpenAPI for a body the handler parses itself from raw bytes."""
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": inline_schema(model)}},
        }
    }
