"""One mapping from errors to typed HTTP answers: ``{error, code, retryable, ...}``.

``HelixRoute`` applies it to every route the router builds, so an embedding app needs no
handler of its own; ``install_error_handlers(app)`` applies the same mapping to an app's own
routes. Nothing answers an untyped body: FastAPI's own validation errors (query parameters)
become the fixed ``validation_error``, and an unexpected exception is a typed 500 that reveals
nothing about it (it is logged with its traceback).

A transient database fault (the database unreachable or restarting, a dropped connection, a
serialization failure; see ``store.faults``) is not a bug: it answers 503 ``store_unavailable``
with ``retryable: true`` and a ``Retry-After`` header, so a client retries the same request.
Its driver text (which can hold SQL and parameters) is never in the body; the log gets the
exception's type and SQLSTATE only.

Every 400 answer logs its cause as one ``server.bad_request`` line (INFO): the method, the path,
the code, the message, the ``cause`` and where and why validation failed; never the request
body or a submitted value, so the log says why even when the answer is the fixed message.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from typing import Any

from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError as FastAPIValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..errors import HelixError, RequestValidationError, StoreUnavailableError, with_details
from ..observability.log import describe_issues, log_event, logger
from ..store.faults import DATABASE_ERRORS, is_transient
from .body import REQUEST_INVALID_MESSAGE

__all__ = [
    "HelixRoute",
    "end_on_outage",
    "error_response",
    "install_error_handlers",
    "refused_fields",
    "store_unavailable",
]

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
    """The typed JSON answer of ``exc`` with its ``http_status`` (and ``Retry-After`` when the
    error says when to retry: ``rate_limited``, ``store_unavailable``)."""
    headers: dict[str, str] = {}
    if "retryAfterSeconds" in exc.details:
        headers["Retry-After"] = str(exc.details["retryAfterSeconds"])
    status = exc.http_status if 400 <= exc.http_status < 600 else 500
    return JSONResponse(_jsonable(exc.to_body()), status_code=status, headers=headers)


def store_unavailable(request: Request | None, exc: BaseException) -> StoreUnavailableError:
    """Log a transient database fault safely and return the error to answer instead."""
    sqlstate = getattr(getattr(exc, "orig", None), "sqlstate", None) or getattr(
        exc, "sqlstate", None
    )
    log_event(
        "server.store_unavailable",
        method=request.method if request is not None else None,
        path=request.url.path if request is not None else None,
        errorType=type(exc).__name__,
        sqlstate=sqlstate,
    )
    return StoreUnavailableError()


async def end_on_outage(body: AsyncIterator[bytes], tail: bytes) -> AsyncIterator[bytes]:
    """``body``, ended cleanly with ``tail`` if the store becomes unavailable mid-stream.

    A streamed response has sent its status already, so it cannot become a 503: it ends with
    a frame that tells the client to come back (and the client resumes from what it has).
    Any other failure propagates (a bug shows as a broken stream and a logged traceback).
    """
    try:
        async for chunk in body:
            yield chunk
    except Exception as exc:
        if not is_transient(exc):
            raise
        if not isinstance(exc, StoreUnavailableError):
            store_unavailable(None, exc)
        yield tail


def _log_bad_request(request: Request, code: str, error: str, **fields: Any) -> None:
    """One ``server.bad_request`` line: what was refused and why (no body, no values)."""
    log_event(
        "server.bad_request",
        method=request.method,
        path=request.url.path,
        code=code,
        error=error,
        **{k: v for k, v in fields.items() if v},
    )


#: How many refused fields a 400 names (the log has the first five findings too).
_FIELDS_SHOWN = 5


def _field_path(loc: Sequence[Any]) -> str:
    """A finding's location as the wire spells it: ``messages[0].role``; the names pydantic
    adds for a union's arm or a validator (``function-after[...]``) are left out."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif isinstance(part, str) and part.isidentifier():
            path += f".{part}" if path else part
    return path


def refused_fields(issues: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """The fields a body's findings refused, each once: ``{field, problem}``, ``problem``
    pydantic's error type (``missing``, ``extra_forbidden``, ``string_type``, ``blank``, ...).
    Never a value or a pattern: only where and what kind."""
    fields: list[dict[str, str]] = []
    for issue in issues:
        path = _field_path(issue.get("loc", ()))
        if path and all(f["field"] != path for f in fields):
            fields.append({"field": path, "problem": str(issue.get("type", "invalid"))})
    return fields[:_FIELDS_SHOWN]


def _with_fields(exc: HelixError) -> HelixError:
    """A body refused by its schema answers which fields: ``field`` (the first) and
    ``fields``, next to its ``cause``."""
    if not isinstance(exc, RequestValidationError) or "fields" in exc.details:
        return exc
    fields = refused_fields(exc.issues)
    if not fields:
        return exc
    return with_details(exc, field=fields[0]["field"], fields=fields)


def _answer(request: Request, exc: HelixError) -> JSONResponse:
    """``error_response(exc)`` (a refused body names its fields), and the cause of a 400 (or
    the store's outage) in the log."""
    if isinstance(exc, StoreUnavailableError):
        # The store waited out a transient fault as long as its caller's patience allows:
        # the same line as a fault met here (``store_unavailable``).
        store_unavailable(request, exc.__cause__ or exc)
    response = error_response(_with_fields(exc))
    if response.status_code == 400:
        # The findings: InvalidResultError keeps pydantic's issues; a body that failed its
        # schema carries them as the exception's notes (the answer may not show them).
        issues = getattr(exc, "issues", None)
        found = describe_issues(issues) if isinstance(issues, list | tuple) and issues else None
        notes = "; ".join(getattr(exc, "__notes__", ()))
        _log_bad_request(
            request,
            str(exc.code),
            exc.message,
            cause=exc.details.get("cause"),
            toolCallId=exc.details.get("toolCallId"),
            issues=found or notes,
        )
    return response


def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    if is_transient(exc):
        return error_response(store_unavailable(request, exc))
    logger.error(
        "HTTP %s %s failed",
        request.method,
        request.url.path,
        exc_info=exc,
        extra={"event": "server.internal_error"},
    )
    return JSONResponse(dict(_INTERNAL), status_code=500)


def _query_invalid(request: Request, exc: FastAPIValidationError) -> JSONResponse:
    _log_bad_request(
        request,
        "validation_error",
        REQUEST_INVALID_MESSAGE,
        cause="query",
        issues=describe_issues(exc.errors()),
    )
    body = {
        "error": REQUEST_INVALID_MESSAGE,
        "code": "validation_error",
        "retryable": False,
        "cause": "query",
    }
    return JSONResponse(body, status_code=400)


#: A GET's credential (a browser's EventSource cannot set headers): on every GET route.
_CREDENTIAL_QUERY = "token"


def _query_names(dependant: Dependant) -> set[str]:
    names = {param.alias for param in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


def _undocumented_query(route: APIRoute, request: Request) -> list[str]:
    """The query names ``route`` does not document: one spelling per parameter, as in bodies
    (``session_id`` for ``sessionId`` is refused, not silently ignored)."""
    documented = _query_names(route.dependant)
    if request.method == "GET":
        documented.add(_CREDENTIAL_QUERY)
    return sorted(set(request.query_params.keys()) - documented)


class HelixRoute(APIRoute):
    """An ``APIRoute`` whose every failure is a typed answer (see the module docstring), and
    that refuses a query parameter it does not document (400, ``cause: query``)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                unknown = _undocumented_query(self, request)
                if unknown:
                    raise RequestValidationError(
                        REQUEST_INVALID_MESSAGE, cause="query", parameters=unknown
                    )
                return await handler(request)
            except HelixError as exc:
                return _answer(request, exc)
            except FastAPIValidationError as exc:
                return _query_invalid(request, exc)
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

    async def helix_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HelixError)
        return _answer(request, exc)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 400:
            _log_bad_request(request, "http_error", str(exc.detail))
        body = {
            "error": str(exc.detail),
            "code": _HTTP_CODES.get(exc.status_code, "http_error"),
            "retryable": False,
        }
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    async def database_error(request: Request, exc: Exception) -> Response:
        # A database failure escaping an app route: 503 when transient, else the typed 500.
        return _unexpected(request, exc)

    app.add_exception_handler(HelixError, helix_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    for database_error_type in DATABASE_ERRORS:
        app.add_exception_handler(database_error_type, database_error)
