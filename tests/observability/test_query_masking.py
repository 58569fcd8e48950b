"""Credentials in query strings never reach the access log (uvicorn's record, as it logs it)."""

from __future__ import annotations

import io
import json
import logging

import pytest

from helix_dbos.observability.logging_config import (
    QuerySecretFilter,
    configure_logging,
    install_query_secret_filter,
    mask_query_secrets,
)

TOKEN = "eyJzaWQiOiJzZXNfMSIsImV4cCI6MX0.Mw_aK1r-Y-vti8qQE_ZsLOQ-092pKdRWlARTMaop9c8"


@pytest.mark.parametrize(
    ("path", "masked"),
    [
        ("/sse?sessionId=ses_1&token=abc", "/sse?sessionId=ses_1&token=***"),
        ("/sse?token=abc&sessionId=ses_1", "/sse?token=***&sessionId=ses_1"),
        (
            "/x?access_token=a&API-Key=b&password=c&auth=d",
            "/x?access_token=***&API-Key=***&password=***&auth=***",
        ),
        (f"/status?sessionId=ses_1&x={TOKEN}", "/status?sessionId=ses_1&x=***"),
        ("/status?sessionId=ses_1&author=bob&token=", "/status?sessionId=ses_1&author=bob&token="),
        ("/chat/c1/stream?token=abc#frag", "/chat/c1/stream?token=***#frag"),
        # The server decodes names: a percent-encoded credential is one all the same.
        ("/sse?sessionId=ses_1&%74oken=abc", "/sse?sessionId=ses_1&%74oken=***"),
        ("/sse?%54OKEN=abc&access%5Ftoken=d", "/sse?%54OKEN=***&access%5Ftoken=***"),
        ("/x?api%5fkey=a&KEY=b&Secret=c&ke%79=d", "/x?api%5fkey=***&KEY=***&Secret=***&ke%79=***"),
        # Repeated keys: every occurrence, whichever one the server reads.
        ("/sse?token=a&token=b&Token=c", "/sse?token=***&token=***&Token=***"),
        ("/sse?sessionId=ses_1&token+=abc", "/sse?sessionId=ses_1&token+=***"),
        # An encoded value of a token's shape under an innocent name.
        (f"/x?v={TOKEN.replace('.', '%2E')}", "/x?v=***"),
        ("/x?monkey=banana&keyboard=qwerty", "/x?monkey=banana&keyboard=qwerty"),
        ("/openapi.json", "/openapi.json"),
        ("token=abc outside a query", "token=abc outside a query"),
    ],
)
def test_mask_query_secrets(path: str, masked: str) -> None:
    """By name (any case, any prefix), or by a signed token's shape under any name; ids,
    other parameters, empty values and text outside a query string are left alone."""
    assert mask_query_secrets(path) == masked


def _access(log: logging.Logger, path: str) -> None:
    # What uvicorn's access logger emits: the path with its query is one argument.
    log.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "GET", path, "1.1", 200)


@pytest.mark.usefixtures("restore_logging")
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_the_servers_access_lines_are_masked_in_both_formats(fmt: str) -> None:
    out = io.StringIO()
    configure_logging(fmt, stream=out)
    _access(logging.getLogger("uvicorn.access"), f"/sse?sessionId=ses_1&token={TOKEN}")
    (line,) = out.getvalue().splitlines()
    assert TOKEN not in line
    message = json.loads(line)["message"] if fmt == "json" else line
    assert '"GET /sse?sessionId=ses_1&token=*** HTTP/1.1" 200' in message


def test_the_filter_masks_before_any_handler_of_the_app() -> None:
    """Installed on the logger (as ``create_router`` does), it masks for whatever handler an
    app configured itself; installing it twice adds one filter."""
    log = logging.getLogger("tests.query_masking.access")
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    handler = Keep()
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    try:
        install_query_secret_filter(log.name)
        install_query_secret_filter(log.name)
        assert sum(isinstance(f, QuerySecretFilter) for f in log.filters) == 1
        _access(log, "/status?sessionId=ses_1&token=abc")
    finally:
        log.removeHandler(handler)
        log.filters.clear()
    assert seen == ['127.0.0.1:5000 - "GET /status?sessionId=ses_1&token=*** HTTP/1.1" 200']
