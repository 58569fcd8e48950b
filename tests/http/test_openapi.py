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
