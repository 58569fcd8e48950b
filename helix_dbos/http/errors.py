"""One mapping from errors to typed HTTP answers: ``{error, code, retryable, ...}``.

``HelixRoute`` applies it to every route the router builds, so an embedding app needs no
handler of its own; ``install_error_handlers(app)`` applies the same mapping to an app's own
routes. Nothing answers an untyped body: FastAPI's own validation errors (query parameters)
become the fixed ``validation_error``, and an unexpected exception is a typed 500 that reveals
nothing about it (it is logged with its traceback).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError as FastAPIValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..errors import HelixError, RateLimitedError
from ..observability.log import logger
from .body import REQUEST_INVALID_MESSAGE

__all__ = ["HelixRoute", "error_response", "install_error_handlers"]

_INTERNAL = {
    "error": "The server failed to handle the request",
    "code": "framework_internal_error",
    "retryable": False,
}


def _jsonable(body: dict[str, Any]) -> dict[str, Any]:
    # Error details can hold values JSON cannot carry (an exception in a pydantic context).
    result: dict[str, Any] = json.loads(json.dumps(body, default=str))
    return result


def error_response(exc: HelixError) -> JSONResponse:
    """The typed JSON answer of ``exc`` with its ``http_status`` (and ``Retry-After``)."""
    headers: dict[str, str] = {}
    if isinstance(exc, RateLimitedError) and "retryAfterSeconds" in exc.details:
        headers["Retry-After"] = str(exc.details["retryAfterSeconds"])
    status = exc.http_status if 400 <= exc.http_status < 600 else 500
    return JSONResponse(_jsonable(exc.to_body()), status_code=status, headers=headers)


def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    logger.error(
        "HTTP %s %s failed",
        request.method,
        request.url.path,
        exc_info=exc,
        extra={"event": "server.internal_error"},
    )
    return JSONResponse(dict(_INTERNAL), status_code=500)


def _query_invalid() -> JSONResponse:
    body = {
        "error": REQUEST_INVALID_MESSAGE,
        "code": "validation_error",
        "retryable": False,
        "cause": "query",
    }
    return JSONResponse(body, status_code=400)


class HelixRoute(APIRoute):
    """An ``APIRoute`` whose every failure is a typed answer (see the module docstring)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except HelixError as exc:
                return error_response(exc)
            except FastAPIValidationError:
                return _query_invalid()
            except Exception as exc:
                # A bug, not bad input: answered typed, logged with its traceback.
                return _unexpected(request, exc)

        return guarded


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


def install_error_handlers(app: FastAPI) -> None:
    """Answer errors of the app's own routes typed too.

    ``HelixError`` gets its typed body; the framework's own answers (an unknown path, a wrong
    method) get ``{error, code, retryable}`` with their status (``not_found``,
    ``method_not_allowed``, else ``http_error``).
    """

    async def helix_error(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HelixError)
        return error_response(exc)

    async def http_error(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        body = {
            "error": str(exc.detail),
            "code": _HTTP_CODES.get(exc.status_code, "http_error"),
            "retryable": False,
        }
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    app.add_exception_handler(HelixError, helix_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
