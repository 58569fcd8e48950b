"""Property: no request, however malformed, oversized or deep, gets a 5xx or stores anything.

Malformed, near-valid, oversized and deeply nested bodies go to every route of the three
routers (open, token-protected, verbose); every refusal must be the typed body
``{error, code, retryable}``, and the session tables must not change.
"""

from __future__ import annotations

import json
import string
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import BODY_CAP, HttpServer
from .helpers import TYPED_KEYS

PREFIXES = ("", "/secure", "/verbose")
POST_ROUTES = (
    "/start",
    "/resume",
    "/interrupt",
    "/abort",
    "/submit-tool-result",
    "/chat/{id}/submit-tool-result",
)
FIELDS = (
    "sessionId",
    "toolCallId",
    "result",
    "error",
    "kind",
    "approvalId",
    "approved",
    "reason",
    "editedInput",
    "input",
    "agentType",
    "message",
    "mode",
    "abandonPending",
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)
near_valid = st.fixed_dictionaries(
    {},
    optional={
        "sessionId": st.text(max_size=12) | json_values,
        "toolCallId": st.text(max_size=12) | json_values,
        "kind": st.sampled_from(["client-tool-result", "approval-response", "other"]),
    },
).flatmap(
    lambda base: st.dictionaries(
        st.sampled_from(FIELDS) | st.text(max_size=8), json_values, max_size=4
    ).map(lambda d: {**base, **d})
)


def _nested(depth: int, kind: str) -> bytes:
    if kind == "list":
        return b"[" * depth + b"]" * depth
    return (b'{"a":' * depth) + b"1" + (b"}" * depth)


bodies = st.one_of(
    near_valid.map(lambda d: json.dumps(d).encode()),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=64),
    st.builds(_nested, st.integers(60, 3_000), st.sampled_from(["list", "object"])),
    st.integers(BODY_CAP + 1, BODY_CAP * 2).map(
        lambda n: json.dumps({"sessionId": "s", "toolCallId": "c", "result": "x" * n}).encode()
    ),
    st.sampled_from(
        [
            b'{"sessionId": NaN, "toolCallId": "c", "result": 1}',
            b'{"sessionId": "s", "toolCallId": "c", "result": Infinity}',
            b'{"sessionId": "s", "toolCallId": "c", "result": 1e999}',
            b'{"sessionId": "s\\u0000", "toolCallId": "c", "result": 1}',
            b'{"sessionId": "s", "toolCallId": "c", "result": "\\ud83d"}',
            b'{"sessionId": "s", "toolCallId": "c", "result": ' + b"9" * 5000 + b"}",
            b"",
        ]
    ),
)
content_types = st.sampled_from(
    [
        "application/json",
        "application/json; charset=utf-8",
        "application/merge-patch+json",
        "text/plain",
        "",
    ]
)
header_text = st.text(alphabet=string.printable.strip() + " ", max_size=12)
token_text = header_text.map(str.strip).filter(bool)


# The server runs in a thread of this process, and its background work (DBOS's pollers, the
# store's retry jitter) uses the global `random` while Hypothesis draws; Hypothesis warns that
# the global random state changed during generation. The draws themselves use no `random`.
pytestmark = pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")


def assert_answer(response: httpx.Response) -> None:
    """Never a 5xx, never a success; every refusal typed."""
    assert response.status_code < 500, response.text
    assert response.status_code >= 400, response.text
    body: Any = response.json()
    assert isinstance(body, dict) and all(k in body for k in TYPED_KEYS), body
    assert isinstance(body["error"], str) and isinstance(body["code"], str)
    assert isinstance(body["retryable"], bool)


def test_post_routes_never_crash_and_store_nothing(
    http_server: HttpServer, client: httpx.Client
) -> None:
    """Any body to any POST route: a typed 4xx, and no row in the session tables."""
    before = http_server.count_rows()

    @settings(
        max_examples=60,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(
        prefix=st.sampled_from(PREFIXES),
        route=st.sampled_from(POST_ROUTES),
        chat_id=st.text(max_size=10).filter(lambda s: s not in (".", "..")),
        body=bodies,
        content_type=content_types,
        token=st.none() | token_text,
    )
    def probe(
        prefix: str, route: str, chat_id: str, body: bytes, content_type: str, token: str | None
    ) -> None:
        headers = {"content-type": content_type} if content_type else {}
        if token is not None:
            headers["authorization"] = f"Bearer {token}"
        path = prefix + route.replace("{id}", quote(chat_id, safe="") or "x")
        assert_answer(client.post(path, content=body, headers=headers))

    probe()
    assert http_server.count_rows() == before


def test_get_routes_never_crash(http_server: HttpServer, client: httpx.Client) -> None:
    """Any query and Last-Event-ID to /status and /sse: a typed 4xx, nothing stored."""
    before = http_server.count_rows()

    @settings(max_examples=40, deadline=None)
    @given(
        prefix=st.sampled_from(PREFIXES),
        route=st.sampled_from(["/status", "/sse"]),
        session_id=st.none() | st.text(max_size=300),
        from_sequence=st.none() | st.integers(-5, 2**70).map(str) | header_text,
        last_event_id=st.none() | token_text | st.integers(-5, 2**70).map(str),
    )
    def probe(
        prefix: str,
        route: str,
        session_id: str | None,
        from_sequence: str | None,
        last_event_id: str | None,
    ) -> None:
        params = {}
        if session_id is not None:
            params["sessionId"] = session_id
        if from_sequence is not None:
            params["fromSequence"] = from_sequence
        headers = {"Last-Event-ID": last_event_id} if last_event_id is not None else {}
        assert_answer(client.get(prefix + route, params=params, headers=headers))

    probe()
    assert http_server.count_rows() == before
