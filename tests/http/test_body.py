"""Body reading and parsing, unit by unit: the guard counts bytes, the parser bounds depth."""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.requests import Request

from helix_dbos.errors import PayloadTooLargeError, RequestValidationError
from helix_dbos.http.body import MAX_JSON_DEPTH, LengthRequiredError, parse_json, read_body


def request(headers: dict[str, str], chunks: list[bytes]) -> Request:
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/x",
        "query_string": b"",
        "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
    }
    queue = list(chunks)

    async def receive() -> dict[str, Any]:
        chunk = queue.pop(0) if queue else b""
        return {"type": "http.request", "body": chunk, "more_body": bool(queue)}

    return Request(scope, receive)


JSON = {"content-type": "application/json"}


async def test_bytes_are_counted_while_reading() -> None:
    """A body longer than its Content-Length says is cut off at the cap: 413 request_body."""
    req = request({**JSON, "content-length": "10"}, [b"x" * 600] * 5)
    with pytest.raises(PayloadTooLargeError) as refused:
        await read_body(req, 1000, message="m", route="t")
    assert refused.value.details["cause"] == "request_body"
    assert refused.value.details["sizeBytes"] == 1200


async def test_declared_length_is_checked_before_reading() -> None:
    """An oversized Content-Length is refused without reading a byte."""

    async def receive() -> dict[str, Any]:
        raise AssertionError("the body was read")

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/x",
        "query_string": b"",
        "headers": [(b"content-length", b"5000"), (b"content-type", b"application/json")],
    }
    with pytest.raises(PayloadTooLargeError):
        await read_body(Request(scope, receive), 1000, message="m", route="t")


async def test_length_and_emptiness() -> None:
    """Transfer-Encoding without Content-Length is 411; an empty or unreadable length is 400."""
    with pytest.raises(LengthRequiredError):
        await read_body(
            request({**JSON, "transfer-encoding": "chunked"}, [b"{}"]), 100, message="m", route="t"
        )
    with pytest.raises(RequestValidationError):
        await read_body(request(JSON, []), 100, message="m", route="t")
    with pytest.raises(RequestValidationError):
        await read_body(
            request({**JSON, "content-length": "1e3"}, [b"{}"]), 100, message="m", route="t"
        )
    body = await read_body(
        request({**JSON, "content-length": "2"}, [b"{}"]), 100, message="m", route="t"
    )
    assert body == b"{}"


@pytest.mark.parametrize(
    "raw",
    [
        b"NaN",
        b"[Infinity]",
        b"1e999",
        b'"\\u0000"',
        b'{"\\u0000": 1}',
        b'"\\udc00"',
        b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1),
        b"[" * 100_000 + b"]" * 100_000,
        b"\xff",
        b"1" * 5000,
    ],
)
def test_parse_refuses(raw: bytes) -> None:
    """Not JSON, not storable, or nested too deeply: ValueError (the route's 400)."""
    with pytest.raises(ValueError):
        parse_json(raw)


def test_parse_accepts_the_deepest_allowed() -> None:
    """Exactly MAX_JSON_DEPTH levels parse; ordinary unicode is kept."""
    deep = b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH
    assert parse_json(deep) == json.loads(deep)
    assert parse_json('{"k": "h\u00e9llo \U0001f600"}'.encode()) == {"k": "h\u00e9llo \U0001f600"}
