"""What the routes declare in the OpenAPI document: the typed error answers, raw bodies,
parameters the handlers check themselves, and the session-token security scheme.

The routes parse their bodies themselves (``body.py``), so FastAPI cannot derive the request
schemas: ``raw_json_body_doc`` declares them, with every nested model inlined (a ``$ref`` into
the model's own ``$defs`` would dangle in the OpenAPI document, which keeps schemas under
``components``). Bodies with variants are unions, one arm per variant (``body_variants.py``).

``document_session_tokens(app)`` declares the session tokens (an HTTP bearer scheme) on the
routes that need one, so ``/docs`` has an Authorize button. The standalone server calls it when
tokens are on; without authentication the document declares no scheme, since none is needed.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, WithJsonSchema

from .schemas import IDENTIFIER_MAX_LENGTH, IDENTIFIER_PATTERN, ErrorBody

__all__ = [
    "AUTH_RESPONSES",
    "BODY_RESPONSES",
    "CREATES_SESSION_DOC",
    "IDENTIFIER_PATH_DOC",
    "LAST_EVENT_ID_DOC",
    "QUERY_RESPONSES",
    "SESSION_TOKEN_SCHEME",
    "document_session_tokens",
    "error_response_doc",
    "event_stream_doc",
    "raw_json_body_doc",
]

#: The ``Last-Event-ID`` header as the document shows it: the handler reads it itself (digits,
#: at most 2^53). Up to 15 digits is always below that bound, the rule a schema can state.
LAST_EVENT_ID_DOC = WithJsonSchema(
    {
        "type": "string",
        "pattern": "^[0-9]{1,15}$",
        "description": "The sequence of the last event received: the stream resumes after it.",
    }
)
#: An id in the path that the handler checks itself (the identifier rule of every id).
IDENTIFIER_PATH_DOC = WithJsonSchema(
    {
        "type": "string",
        "minLength": 1,
        "maxLength": IDENTIFIER_MAX_LENGTH,
        "pattern": IDENTIFIER_PATTERN,
    }
)

#: The session-token scheme's name in the document's ``components.securitySchemes``.
SESSION_TOKEN_SCHEME = "sessionToken"
#: The mark (``openapi_extra``) of a route that may create a session (``/start``,
#: ``/chat/sessions``): a request without a token may call it, since there is nothing to bind
#: a token to yet (``auth.NEW_SESSION_OPERATIONS``), so a token is optional there.
CREATES_SESSION_DOC: dict[str, Any] = {"x-creates-session": True}


def error_response_doc(description: str, model: type[BaseModel] = ErrorBody) -> dict[str, Any]:
    """One documented refusal."""
    return {"model": model, "description": description}


def event_stream_doc(description: str, data: str, *, json_data: bool = True) -> dict[str, Any]:
    """A 200 answered as Server-Sent Events; the schema describes one event of the stream.

    An OpenAPI 3.1 document has no keyword for the items of a stream (3.2 adds
    ``itemSchema``): tools read a ``text/event-stream`` schema as the schema of each event,
    ``{id, event, data, retry}``, which is what this one says.
    """
    data_schema: dict[str, Any] = {"type": "string", "description": data}
    if json_data:
        data_schema["contentMediaType"] = "application/json"
    event = {
        "type": "object",
        "properties": {
            "id": {"type": "string", "description": "The event's id, when it has one."},
            "event": {"type": "string", "description": "The event type (`message`)."},
            "data": data_schema,
            "retry": {"type": "integer"},
        },
        "required": ["data"],
    }
    return {"description": description, "content": {"text/event-stream": {"schema": event}}}


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


def _closed(node: Any) -> Any:
    """``node`` with every object that lists its ``properties`` closed to other names: what
    a request body's validation enforces (``body.validate_body``), whatever the model's own
    configuration says. Free-form objects (no ``properties``) stay open."""
    if isinstance(node, list):
        return [_closed(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: _closed(v) for k, v in node.items()}
    if isinstance(node.get("properties"), dict):
        out["additionalProperties"] = False
    return out


def inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The request model's JSON schema (wire names) with its ``$defs`` inlined (no recursive
    models), every object with named properties closed to other names."""
    schema = model.model_json_schema(by_alias=True)
    inlined: dict[str, Any] = _closed(_inline(schema, schema.get("$defs", {})))
    return inlined


def raw_json_body_doc(model: type[BaseModel]) -> dict[str, Any]:
    """OpenAPI for a body the handler parses itself from raw bytes."""
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": inline_schema(model)}},
        }
    }


def document_session_tokens(app: FastAPI) -> None:
    """Declare session tokens in ``app``'s OpenAPI document: an HTTP bearer scheme on every
    operation that checks credentials (it documents a 401), optional on those that create a
    session (``CREATES_SESSION_DOC``), required on the others.
    """
    build = app.openapi

    def openapi() -> dict[str, Any]:
        spec = build()  # FastAPI builds the document once and caches it
        schemes = spec.setdefault("components", {}).setdefault("securitySchemes", {})
        if SESSION_TOKEN_SCHEME in schemes:
            return spec
        schemes[SESSION_TOKEN_SCHEME] = {
            "type": "http",
            "scheme": "bearer",
            "description": "The token `/start` (or `POST /chat/sessions`) answers, bound to "
            "its session: `Authorization: Bearer <token>`. A browser's event stream, which "
            "cannot set headers, may send it as `?token=` on a GET instead.",
        }
        required: list[dict[str, list[str]]] = [{SESSION_TOKEN_SCHEME: []}]
        for item in spec.get("paths", {}).values():
            for operation in item.values():
                if not isinstance(operation, dict) or "401" not in operation.get("responses", {}):
                    continue
                if operation.get("x-creates-session"):
                    # `{}` first: no token is one accepted way in, a token the other.
                    operation["security"] = [{}, *required]
                else:
                    operation["security"] = required
        return spec

    app.openapi = openapi  # type: ignore[method-assign]
