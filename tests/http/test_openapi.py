"""GET /openapi.json: every route with its request model, response model and error answers;
bodies with variants as one arm per variant; the session-token security scheme."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs
import pytest

BODY_ROUTES = {
    "/start": {"agentType", "message", "sessionId"},
    "/resume": {"sessionId", "mode", "message", "abandonPending", "checkpointId"},
    "/retry": {"sessionId", "message", "checkpointId"},
    "/interrupt": {"sessionId", "reason"},
    "/abort": {"sessionId", "reason"},
    "/submit-tool-result": {
        "kind",
        "sessionId",
        "toolCallId",
        "result",
        "error",
        "approvalId",
        "approved",
        "reason",
        "editedInput",
        "input",
    },
    "/chat/{chat_id}/submit-tool-result": {
        "kind",
        "toolCallId",
        "result",
        "error",
        "approvalId",
        "approved",
        "reason",
        "editedInput",
        "input",
    },
}
QUERY_ROUTES = ("/status", "/sse", "/checkpoints")
SUBMIT_ERRORS = {"400", "401", "403", "404", "409", "411", "413", "415", "429", "500"}


def body_fields(schema: dict[str, Any]) -> set[str]:
    """The fields a body schema names: its properties, or those of all of its arms."""
    arms = schema.get("oneOf", [schema])
    return {name for arm in arms for name in arm["properties"]}


def resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    name = ref.rsplit("/", 1)[-1]
    resolved: dict[str, Any] = spec["components"]["schemas"][name]
    return resolved


def test_openapi_documents_every_route(client: httpx.Client) -> None:
    """Each route declares its request body (POST) or parameters (GET), its 200 model and its
    typed error answers."""
    spec = client.get("/openapi.json").json()
    paths = spec["paths"]
    for prefix in ("", "/secure", "/verbose"):
        for route, fields in BODY_ROUTES.items():
            op = paths[prefix + route]["post"]
            schema = op["requestBody"]["content"]["application/json"]["schema"]
            assert body_fields(schema) == fields, route
            assert "$defs" not in schema and op["requestBody"]["required"] is True
            responses = op["responses"]
            ok = resolve(spec, responses["200"]["content"]["application/json"]["schema"])
            assert ok["properties"], route
            expected = (
                SUBMIT_ERRORS
                if "submit" in route
                else ({"400", "401", "403", "404", "411", "413", "415", "500"})
            )
            assert expected <= set(responses), (route, sorted(responses))
            for status in expected:
                error = resolve(spec, responses[status]["content"]["application/json"]["schema"])
                assert {"error", "code", "retryable"} <= set(error["properties"]), (route, status)
                assert responses[status]["description"]
        for route in QUERY_ROUTES:
            op = paths[prefix + route]["get"]
            assert "sessionId" in {p["name"] for p in op["parameters"]}
            assert {"200", "400", "401", "403", "404", "500"} <= set(op["responses"])
    status_model = resolve(
        spec, paths["/status"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    )
    assert {"sessionId", "status", "runId", "pendingToolCalls"} <= set(status_model["properties"])
    assert "text/event-stream" in paths["/sse"]["get"]["responses"]["200"]["content"]
    submit_ok = resolve(
        spec,
        paths["/submit-tool-result"]["post"]["responses"]["200"]["content"]["application/json"][
            "schema"
        ],
    )
    assert {"status", "continuation"} <= set(submit_ok["properties"])
    (last_event_id,) = [
        p for p in paths["/sse"]["get"]["parameters"] if p["name"] == "Last-Event-ID"
    ]
    assert last_event_id["schema"] == {
        "type": "string",
        "pattern": "^[0-9]{1,15}$",
        "description": "The sequence of the last event received: the stream resumes after it.",
        "title": "Last-Event-Id",
    }
    (chat_id,) = paths["/chat/{chat_id}/submit-tool-result"]["post"]["parameters"]
    assert chat_id["schema"]["pattern"] == "^[^\\x00-\\x1f\\x7f]+$"


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def test_every_ref_of_the_standalone_servers_document_resolves(tmp_path: Any) -> None:
    """The whole server (agent routes and the AI SDK chat): no `$ref` dangles (the chat body
    once pointed at `#/$defs/UIMessage`, which an OpenAPI document does not have)."""
    from helix_dbos.config import HelixSettings
    from helix_dbos.http import create_app

    app = create_app(
        settings=HelixSettings(database_url=f"sqlite:///{tmp_path}/x.db"),
        allow_unauthenticated=True,
    )
    spec = app.openapi()
    refs = _refs(spec)
    assert refs, "the document has references to check"
    for ref in refs:
        assert ref.startswith("#/components/schemas/"), ref
        assert ref.rsplit("/", 1)[-1] in spec["components"]["schemas"], ref
    chat = spec["paths"]["/chat"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    roles = [arm["properties"]["role"] for arm in chat["properties"]["messages"]["items"]["oneOf"]]
    assert roles == [{"const": "user"}, {"const": "assistant"}]
    assert "/chat/sessions" in spec["paths"]


def body_schema(spec: dict[str, Any], path: str) -> dict[str, Any]:
    schema: dict[str, Any] = spec["paths"][path]["post"]["requestBody"]["content"][
        "application/json"
    ]["schema"]
    return schema


def arms_of(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The arms of a union body by title."""
    return {arm["title"]: arm for arm in schema["oneOf"]}


def test_bodies_with_variants_have_one_arm_per_variant(client: httpx.Client) -> None:
    """A submit is one arm per `kind`, a resume one arm per `mode`: the tag a const, what the
    variant requires required, and nothing else allowed."""
    spec = client.get("/openapi.json").json()
    submit = arms_of(body_schema(spec, "/submit-tool-result"))
    assert set(submit) == {"Client tool result", "Approval response"}
    result = submit["Client tool result"]
    assert result["properties"]["kind"] == {
        "type": "string",
        "const": "client-tool-result",
        "default": "client-tool-result",
    }
    assert set(result["properties"]) == {"kind", "sessionId", "toolCallId", "result", "error"}
    assert result["required"] == ["sessionId", "toolCallId"]
    assert result["oneOf"] == [{"required": ["result"]}, {"required": ["error"]}]
    assert result["properties"]["error"]["type"] == "string"
    approval = submit["Approval response"]
    assert approval["properties"]["kind"] == {"type": "string", "const": "approval-response"}
    assert approval["required"] == ["kind", "sessionId", "toolCallId", "approvalId", "approved"]
    assert approval["properties"]["approved"] == {"type": "boolean"}
    assert set(approval["properties"]) == {
        "kind",
        "sessionId",
        "toolCallId",
        "approvalId",
        "approved",
        "reason",
        "editedInput",
        "input",
    }
    chat_submit = arms_of(body_schema(spec, "/chat/{chat_id}/submit-tool-result"))
    assert chat_submit["Client tool result"]["required"] == ["toolCallId"]
    resume = arms_of(body_schema(spec, "/resume"))
    assert {title: arm["required"] for title, arm in resume.items()} == {
        "Continue": ["sessionId"],
        "With a message": ["mode", "sessionId", "message"],
        "From a checkpoint": ["mode", "sessionId", "checkpointId"],
    }
    for arm in [*submit.values(), *chat_submit.values(), *resume.values()]:
        assert arm["additionalProperties"] is False and arm["type"] == "object", arm["title"]


def submit(session_id: str, **fields: Any) -> dict[str, Any]:
    return {"sessionId": session_id, "toolCallId": "call_none", **fields}


#: Submit bodies the document accepts: the server must take each (no pending call matches: 404).
SUBMITS_BOTH_ACCEPT = [
    {"result": None},
    {"kind": "client-tool-result", "result": {"ok": True}},
    {"error": "the tool failed"},
    {"kind": "approval-response", "approvalId": "apr_1", "approved": True},
    {
        "kind": "approval-response",
        "approvalId": "apr_1",
        "approved": False,
        "reason": None,
        "editedInput": {"a": 1},
        "input": None,
    },
]
#: Submit bodies both refuse (the first is the fuzzer's example from the issue).
SUBMITS_BOTH_REFUSE = [
    {
        "kind": "client-tool-result",
        "approvalId": "apr_1",
        "approved": None,
        "input": {},
        "result": None,
    },
    {},
    {"result": 1, "error": "both"},
    {"kind": "approval-response", "approvalId": "apr_1"},
    {"kind": "approval-response", "approvalId": "apr_1", "approved": True, "result": 1},
    {"kind": "approval-response", "approvalId": "apr_1", "approved": None},
    {"kind": "other", "result": 1},
    {"result": 1, "unknown": 1},
    {"error": "bad\u0000text"},
]
#: The server takes these too; the document leaves them out (an arm forbids a field the model
#: also takes as null), so what the document accepts is always a subset of what the server does.
SUBMITS_ONLY_SERVER_ACCEPTS = [
    {"result": 1, "approvalId": None, "approved": None},
    {"result": 1, "error": None},
]


@pytest.mark.parametrize(
    ("fields", "documented", "served"),
    [(f, True, True) for f in SUBMITS_BOTH_ACCEPT]
    + [(f, False, False) for f in SUBMITS_BOTH_REFUSE]
    + [(f, False, True) for f in SUBMITS_ONLY_SERVER_ACCEPTS],
)
def test_document_and_server_agree_on_submit_bodies(
    client: httpx.Client, fields: dict[str, Any], documented: bool, served: bool
) -> None:
    """A body the document accepts is one the server takes; the ones it refuses the server
    refuses too, except where the document is deliberately stricter."""
    spec = client.get("/openapi.json").json()
    body = submit(f"ses_doc_{uuid.uuid4().hex}", **fields)
    validator = jsonschema_rs.Draft202012Validator(body_schema(spec, "/submit-tool-result"))
    assert validator.is_valid(body) is documented
    answer = client.post("/submit-tool-result", json=body)
    assert (answer.status_code != 400) is served, answer.text
    if served:
        assert answer.status_code == 404, answer.text


def test_session_tokens_are_a_bearer_scheme_only_when_on(tmp_path: Path) -> None:
    """With tokens on, the document declares an HTTP bearer scheme (so /docs has an Authorize
    button), required on every route except those that create a session, where it is
    optional. Without authentication it declares none: no route needs a credential."""
    from helix_dbos.config import HelixSettings
    from helix_dbos.http import create_app

    settings = HelixSettings(database_url=f"sqlite:///{tmp_path}/x.db")
    spec = create_app(settings=settings, auth_secret="s" * 32).openapi()
    scheme = spec["components"]["securitySchemes"]["sessionToken"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    required: list[dict[str, list[str]]] = [{"sessionToken": []}]
    security = {
        f"{method.upper()} {path}": operation.get("security")
        for path, item in spec["paths"].items()
        for method, operation in item.items()
    }
    assert security.pop("POST /start") == [{}, *required]
    assert security.pop("POST /chat/sessions") == [{}, *required]
    assert {"GET /status", "POST /submit-tool-result", "POST /chat", "GET /sse"} <= set(security)
    assert all(value == required for value in security.values()), security

    open_spec = create_app(settings=settings, allow_unauthenticated=True).openapi()
    assert "securitySchemes" not in open_spec.get("components", {})
    operations = [op for item in open_spec["paths"].values() for op in item.values()]
    assert operations and not any("security" in op for op in operations)
