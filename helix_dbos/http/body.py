"""Reading and parsing request bodies ourselves, so every way a body can be wrong is typed.

The order is the seed's: the declared length is checked before a byte is read (a client cannot
make the server allocate an oversized body), the bytes are counted while reading (a body that
lies about its length is cut off), then the JSON is parsed with its nesting bounded, then the
result is validated against the route's pydantic model: under its documented names only (one
spelling per field, no undocumented key, for every model, those of the protocols included).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect, Request

from ..errors import PayloadTooLargeError, RequestValidationError
from ..observability.log import describe_issues, log_event

__all__ = [
    "MAX_JSON_DEPTH",
    "REQUEST_BODY_CAP_FACTOR",
    "REQUEST_INVALID_MESSAGE",
    "LengthRequiredError",
    "UnsupportedMediaTypeError",
    "check_json_value",
    "parse_json",
    "read_body",
    "validate_body",
]

#: The request-body guard is derived from the runtime's submit limit, never configured twice.
REQUEST_BODY_CAP_FACTOR = 4
#: JSON nested deeper than this is refused (Python's parser would recurse towards its limit).
MAX_JSON_DEPTH = 64
#: The fixed message of an invalid body on the routes that are not submits.
REQUEST_INVALID_MESSAGE = "The request is not valid for this route"

M = TypeVar("M", bound=BaseModel)


class LengthRequiredError(RequestValidationError):
    """A body sent with Transfer-Encoding and no Content-Length: its size cannot be bounded
    before reading, so it is refused (411)."""

    http_status = 411


class UnsupportedMediaTypeError(RequestValidationError):
    """A body that is not declared ``application/json`` (415).

    Requiring JSON keeps the routes out of reach of cross-site "simple" requests (HTML forms,
    ``text/plain`` fetches), which a browser sends without a CORS preflight.
    """

    http_status = 415


def _invalid(message: str, cause: str, details: Any = None, *, verbose: bool = False) -> NoReturn:
    extra: dict[str, Any] = {"cause": cause}
    if verbose and details is not None:
        extra["details"] = details
    error = RequestValidationError(message, **extra)
    error.issues = details or ()  # the answer names their fields (errors.py)
    if details:
        # For the server's log (``server.bad_request``) even when the answer hides them.
        error.add_note(describe_issues(details))
    raise error


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


async def read_body(request: Request, cap: int, *, message: str, route: str) -> bytes:
    """Read the request body, at most ``cap`` bytes.

    Raises:
        LengthRequiredError: Transfer-Encoding without Content-Length (411).
        PayloadTooLargeError: the declared or the counted length is over ``cap`` (413,
            ``cause: request_body``); nothing was read past the cap.
        UnsupportedMediaTypeError: the body is not declared JSON (415).
        RequestValidationError: an unreadable Content-Length, an empty body, or a client that
            went away mid-body.
    """
    headers = request.headers
    declared = headers.get("content-length")
    if declared is None and headers.get("transfer-encoding", "").strip():
        raise LengthRequiredError(
            "A request body needs a Content-Length header", cause="length_required"
        )
    size: int | None = None
    if declared is not None:
        # isascii: str.isdigit() also accepts digits int() refuses (superscripts).
        if not (declared.strip().isascii() and declared.strip().isdigit()):
            _invalid(message, "content_length")
        size = int(declared)
        if size > cap:
            log_event(
                "server.body_too_large",
                route=route,
                sizeBytes=size,
                limitBytes=cap,
                source="content_length",
            )
            raise PayloadTooLargeError("request_body", cap, size)
    if not _is_json(headers.get("content-type", "")):
        raise UnsupportedMediaTypeError(
            "The request body must be JSON (Content-Type: application/json)", cause="content_type"
        )
    chunks: list[bytes] = []
    received = 0
    try:
        async for chunk in request.stream():
            received += len(chunk)
            if received > cap:
                # The declared length lied (or was absent): stop reading at the cap.
                log_event(
                    "server.body_too_large",
                    route=route,
                    sizeBytes=received,
                    limitBytes=cap,
                    source="counted",
                )
                raise PayloadTooLargeError("request_body", cap, received)
            chunks.append(chunk)
    except ClientDisconnect:
        _invalid(message, "client_disconnected")
    if received == 0:
        _invalid(message, "empty_body")
    return b"".join(chunks)


def _reject_constant(name: str) -> NoReturn:
    # NaN and Infinity are not JSON; Python's parser accepts them unless told otherwise.
    raise ValueError(f"{name} is not valid JSON")


def parse_json(raw: bytes) -> Any:
    """Parse strict JSON: no NaN/Infinity, bounded depth, storable strings.

    Raises:
        ValueError: the bytes are not such JSON (the caller maps it to a 400).
    """
    try:
        value = json.loads(raw, parse_constant=_reject_constant)
    except RecursionError:
        # Very deep input exhausts the parser's recursion budget; it is a bad body, not a crash.
        raise ValueError("JSON nested too deeply") from None
    check_json_value(value)
    return value


def _storable(text: str) -> bool:
    # Postgres refuses NUL in text and JSONB, and lone surrogates cannot be encoded as UTF-8.
    if "\x00" in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_json_value(value: Any, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Walk a parsed JSON value without recursion: bounded depth, finite numbers, storable text.

    Raises:
        ValueError: the value is nested deeper than ``max_depth`` or holds unstorable text.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            if depth > max_depth:
                raise ValueError("JSON nested too deeply")
            for key, item in node.items():
                if not _storable(key):
                    raise ValueError("JSON text that cannot be stored")
                stack.append((item, depth + 1))
        elif isinstance(node, list):
            if depth > max_depth:
                raise ValueError("JSON nested too deeply")
            stack.extend((item, depth + 1) for item in node)
        elif isinstance(node, str):
            if not _storable(node):
                raise ValueError("JSON text that cannot be stored")
        elif isinstance(node, float) and not math.isfinite(node):
            # A huge literal such as 1e999 parses to inf.
            raise ValueError("A JSON number out of range")


def validate_body(
    model: type[M],
    value: Any,
    *,
    message: str,
    verbose: bool,
    transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> M:
    """Validate a parsed body against ``model``; a failure is the fixed 400.

    Raises:
        RequestValidationError: not an object, or the model refused it; ``details`` (the
            pydantic issues, without the input) only when ``verbose``.
    """
    if not isinstance(value, dict):
        _invalid(
            message,
            "not_an_object",
            [{"loc": [], "msg": "The body must be a JSON object", "type": "dict_type"}],
            verbose=verbose,
        )
    try:
        # One spelling per field: the documented (camelCase) name only, and no name the model
        # does not document, whatever the model's own configuration (ag-ui's models accept
        # both spellings and keep unknown keys): a check and a handler never read two
        # different fields of one body.
        return model.model_validate(
            transform(value) if transform else value, by_alias=True, by_name=False, extra="forbid"
        )
    except ValidationError as exc:
        issues = [
            {"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]}
            for e in exc.errors(include_url=False, include_context=False, include_input=False)
        ]
        _invalid(message, "schema", issues, verbose=verbose)
