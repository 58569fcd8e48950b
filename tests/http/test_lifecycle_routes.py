"""``POST /retry``, ``POST /resume`` with ``from_checkpoint`` and ``GET /checkpoints``."""

from __future__ import annotations

import httpx

from tests.http.helpers import assert_typed, start_parked, wait_status


def _submit(client: httpx.Client, sid: str, call_id: str) -> httpx.Response:
    return client.post(
        "/submit-tool-result",
        json={"sessionId": sid, "toolCallId": call_id, "result": {"applied": 1, "failed": 0}},
    )


def test_checkpoints_rewind_and_retry_over_http(client: httpx.Client) -> None:
    parked = start_parked(client)
    sid, call_id = parked["sessionId"], parked["toolCallId"]
    assert_typed(client.post("/retry", json={"sessionId": sid}), 409, "state_already_running")
    assert _submit(client, sid, call_id).status_code == 200
    wait_status(client, sid, "completed")

    listed = client.get("/checkpoints", params={"sessionId": sid})
    assert listed.status_code == 200, listed.text
    cps = listed.json()["checkpoints"]
    assert cps, listed.json()
    assert {"checkpointId", "runId", "step", "createdAt", "messageCount"} <= set(cps[0])
    stamps = [c["createdAt"] for c in cps]
    assert stamps == sorted(stamps, reverse=True)

    model = [c for c in cps if c["kind"] == "model"][-1]
    rewound = client.post(
        "/resume",
        json={"sessionId": sid, "mode": "from_checkpoint", "checkpointId": model["checkpointId"]},
    )
    assert rewound.status_code == 200, rewound.text
    assert set(rewound.json()) == {"sessionId", "runId"}
    view = wait_status(client, sid, "suspended_client_tool")
    assert [p["toolCallId"] for p in view["pendingToolCalls"]] == [call_id]
    assert view["runId"] == rewound.json()["runId"]
    assert _submit(client, sid, call_id).status_code == 200
    wait_status(client, sid, "completed")

    # Completed: nothing to retry.
    assert_typed(client.post("/retry", json={"sessionId": sid}), 409, "state_not_resumable")


def test_lifecycle_refusals_are_typed(client: httpx.Client) -> None:
    assert_typed(client.post("/retry", json={"sessionId": "no-such"}), 404, "state_not_found")
    assert_typed(
        client.get("/checkpoints", params={"sessionId": "no-such"}), 404, "state_not_found"
    )
    parked = start_parked(client)
    sid = parked["sessionId"]
    assert_typed(
        client.post("/resume", json={"sessionId": sid, "mode": "from_checkpoint"}),
        400,
        "validation_error",
    )
    assert_typed(
        client.post(
            "/resume",
            json={"sessionId": sid, "mode": "from_checkpoint", "checkpointId": "cp_missing"},
        ),
        404,
        "state_not_found",
    )
    # The refused rewind stopped nothing.
    assert wait_status(client, sid, "suspended_client_tool")["pendingToolCalls"]
    assert_typed(
        client.post("/retry", json={"sessionId": sid, "unknown": 1}), 400, "validation_error"
    )
