"""GET /openapi.json: every route with its request model, response model and error answers."""

from __future__ import annotations

from typing import Any

import httpx

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
}
QUERY_ROUTES = ("/status", "/sse", "/checkpoints")
SUBMIT_ERRORS = {"400", "401", "403", "404", "409", "411", "413", "415", "429", "500"}


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
            assert set(schema["properties"]) == fields, route
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
    assert "Last-Event-ID" in {p["name"] for p in paths["/sse"]["get"]["parameters"]}


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
    assert chat["properties"]["messages"]["items"]["properties"]["role"]["enum"] == [
        "system",
        "user",
        "assistant",
    ]
    assert "/chat/sessions" in spec["paths"]
