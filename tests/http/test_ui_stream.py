"""The pure translation of session events into AI SDK UI message stream chunks."""

from __future__ import annotations

import json
from typing import Any

from helix_dbos.http.ui_stream import (
    DONE,
    UI_MESSAGE_STREAM_HEADERS,
    UIMessageStream,
    encode_chunk,
    encode_chunks,
)


def ev(type_: str, sequence: int = 0, **data: Any) -> dict[str, Any]:
    return {"type": type_, "sequence": sequence, "data": data}


def run(events: list[dict[str, Any]], message_id: str | None = "msg_1") -> list[dict[str, Any]]:
    ui = UIMessageStream(message_id)
    out: list[dict[str, Any]] = []
    for item in events:
        out += ui.translate(item)
    return out


CLIENT_CALL = {"toolCallId": "c1", "toolName": "editContent", "input": {"edits": []}}


def test_turn_start_is_start_and_start_step() -> None:
    assert run([ev("turn_start", 1, runId="run_1")]) == [
        {"type": "start", "messageId": "msg_1"},
        {"type": "start-step"},
    ]
    assert run([ev("turn_start", 1)], message_id=None) == [
        {"type": "start"},
        {"type": "start-step"},
    ]


def test_start_is_sent_once_and_implied_by_any_first_event() -> None:
    ui = UIMessageStream("m")
    assert ui.start() == [{"type": "start", "messageId": "m"}, {"type": "start-step"}]
    assert ui.start() == []
    assert ui.translate(ev("turn_start", 1)) == []
    # A continuation's stream starts at a tool result: the start comes first.
    fresh = run([ev("tool_end", 5, toolCallId="c1", toolName="t", output=1)])
    assert [c["type"] for c in fresh] == ["start", "start-step", "tool-output-available"]


def test_a_companion_message_is_a_data_part() -> None:
    reply = {"companion": "reviewer", "text": "looks good", "outcome": "completed"}
    assert run([ev("turn_start", 1), ev("companion_message", 2, **reply)])[2:] == [
        {"type": "data-companion-message", "data": reply}
    ]


def test_user_message_is_not_echoed() -> None:
    assert run([ev("turn_start", 1), ev("user_message", 2, text="hi")])[2:] == []


def test_text_is_start_delta_end_with_one_id_per_text() -> None:
    out = run([ev("turn_start", 1), ev("text", 3, text="Hello"), ev("text", 4, text="again")])
    assert out[2:] == [
        {"type": "text-start", "id": "text_3"},
        {"type": "text-delta", "id": "text_3", "delta": "Hello"},
        {"type": "text-end", "id": "text_3"},
        {"type": "text-start", "id": "text_4"},
        {"type": "text-delta", "id": "text_4", "delta": "again"},
        {"type": "text-end", "id": "text_4"},
    ]
    assert run([ev("text", 0, text="")]) == []
    # Without sequences the ids still differ.
    ui = UIMessageStream()
    first = ui.translate({"type": "text", "data": {"text": "a"}})
    second = ui.translate({"type": "text", "data": {"text": "b"}})
    assert first[-1]["id"] != second[-1]["id"]


def test_client_tool_start_is_tool_input_available() -> None:
    out = run([ev("tool_start", 2, kind="client", deadlineAt=9, **CLIENT_CALL)])
    assert out[2:] == [
        {
            "type": "tool-input-available",
            "toolCallId": "c1",
            "toolName": "editContent",
            "input": {"edits": []},
        }
    ]


def test_server_and_subagent_tool_starts_are_provider_executed() -> None:
    for kind in ("server", "subagent", "invalid"):
        (chunk,) = run([ev("tool_start", 2, kind=kind, **CLIENT_CALL)])[2:]
        assert chunk["type"] == "tool-input-available" and chunk["providerExecuted"] is True


def test_approval_request_is_input_then_approval_request() -> None:
    out = run(
        [
            ev(
                "tool_approval_request",
                2,
                toolCallId="p1",
                toolName="publishDocument",
                input={"documentId": "d"},
                approvalId="run_1::p1",
                argsDigest="abc",
                deadlineAt=9,
            )
        ]
    )
    assert out[2:] == [
        {
            "type": "tool-input-available",
            "toolCallId": "p1",
            "toolName": "publishDocument",
            "input": {"documentId": "d"},
        },
        {"type": "tool-approval-request", "approvalId": "run_1::p1", "toolCallId": "p1"},
    ]


def test_tool_end_outputs() -> None:
    out = run(
        [
            ev("tool_end", 1, toolCallId="a", toolName="t", output={"ok": True}),
            ev("tool_end", 2, toolCallId="b", toolName="t", output=None),
            ev("tool_end", 3, toolCallId="c", toolName="t", error="approval_denied", errorText="x"),
            ev("tool_end", 4, toolCallId="d", toolName="t", error=None, errorText="boom"),
            ev("tool_end", 5, toolCallId="e", toolName="t", error="client_tool_timeout"),
        ]
    )
    assert out[2:] == [
        {"type": "tool-output-available", "toolCallId": "a", "output": {"ok": True}},
        {"type": "tool-output-available", "toolCallId": "b", "output": None},
        {"type": "tool-output-denied", "toolCallId": "c"},
        {"type": "tool-output-error", "toolCallId": "d", "errorText": "boom"},
        {"type": "tool-output-error", "toolCallId": "e", "errorText": "client_tool_timeout"},
    ]


def test_tool_end_errors_carry_the_text_in_error_and_the_code_in_error_code() -> None:
    """The seed's shape: a submitted error string is ``error``; ``errorCode`` is the code."""
    out = run(
        [
            ev(
                "tool_end",
                1,
                toolCallId="a",
                toolName="t",
                error="read-only",
                errorCode="tool_error",
            ),
            ev(
                "tool_end",
                2,
                toolCallId="b",
                toolName="t",
                error="No.",
                errorCode="approval_denied",
            ),
        ]
    )
    assert out[2:] == [
        {"type": "tool-output-error", "toolCallId": "a", "errorText": "read-only"},
        {"type": "tool-output-denied", "toolCallId": "b"},
    ]


def test_suspended_finishes_with_tool_calls() -> None:
    ui = UIMessageStream("m")
    ui.translate(ev("tool_start", 2, kind="client", **CLIENT_CALL))
    assert ui.translate(ev("suspended", 3, toolCallIds=["c1"])) == [
        {"type": "finish-step"},
        {"type": "finish", "finishReason": "tool-calls"},
    ]
    assert ui.finished
    # Nothing after the finish.
    assert ui.translate(ev("text", 4, text="late")) == []
    assert ui.finish() == []


def test_turn_end_completed_is_finish_stop() -> None:
    out = run(
        [
            ev("turn_start", 1),
            ev("text", 2, text="Done."),
            ev("turn_end", 3, outcome="completed", text="Done."),
        ]
    )
    assert [c["type"] for c in out][-2:] == ["finish-step", "finish"]
    assert out[-1] == {"type": "finish", "finishReason": "stop"}
    # The turn_end's text repeats the text event's: it is not sent twice.
    assert sum(c["type"] == "text-delta" for c in out) == 1


def test_turn_end_failed_is_error_then_finish_error() -> None:
    out = run(
        [
            ev("turn_start", 1),
            ev(
                "turn_end",
                2,
                outcome="failed",
                text="",
                error={"code": "max_steps_exceeded", "message": "The turn used all 5 steps"},
            ),
        ]
    )
    assert out[2:] == [
        {"type": "error", "errorText": "The turn used all 5 steps"},
        {"type": "finish", "finishReason": "error"},
    ]
    coded = run([ev("turn_end", 1, outcome="failed", error={"code": "framework_cancelled"})])
    assert coded[2] == {"type": "error", "errorText": "framework_cancelled"}
    bare = run([ev("turn_end", 1, outcome="failed")])
    assert bare[2] == {"type": "error", "errorText": "The turn failed"}


def test_turn_end_interrupted_is_abort() -> None:
    ui = UIMessageStream("m")
    ui.start()
    assert ui.translate(ev("turn_end", 2, outcome="interrupted")) == [
        {"type": "abort", "reason": "interrupted"}
    ]
    assert ui.finished


def test_model_output_after_tool_results_opens_a_new_step() -> None:
    out = run(
        [
            ev("tool_end", 5, toolCallId="c1", toolName="editContent", output={"applied": 2}),
            ev("text", 6, text="Applied 2 edits."),
            ev("tool_approval_request", 7, toolCallId="p1", toolName="p", input={}, approvalId="a"),
            ev("suspended", 8, toolCallIds=["p1"]),
        ]
    )
    assert [c["type"] for c in out] == [
        "start",
        "start-step",
        "tool-output-available",
        "finish-step",
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
        "tool-input-available",
        "tool-approval-request",
        "finish-step",
        "finish",
    ]


def test_a_full_round_trip_of_two_streams() -> None:
    """The first request's stream parks; the answer's stream continues and stops."""
    first = run(
        [
            ev("turn_start", 1, runId="run_1"),
            ev("user_message", 2, text="fix"),
            ev("tool_start", 3, kind="client", **CLIENT_CALL),
            ev("suspended", 4, toolCallIds=["c1"]),
        ]
    )
    assert [c["type"] for c in first] == [
        "start",
        "start-step",
        "tool-input-available",
        "finish-step",
        "finish",
    ]
    second = run(
        [
            ev("tool_end", 5, toolCallId="c1", toolName="editContent", output={"applied": 1}),
            ev("text", 6, text="Applied 1 edit."),
            ev("turn_end", 7, outcome="completed", text="Applied 1 edit."),
        ],
        message_id="a1",
    )
    assert second[0] == {"type": "start", "messageId": "a1"}
    assert second[-1] == {"type": "finish", "finishReason": "stop"}


def test_pending_replays_unsent_waiting_calls() -> None:
    calls: list[dict[str, Any]] = [
        {"toolCallId": "c1", "toolName": "editContent", "input": {}, "kind": "client"},
        {
            "toolCallId": "p1",
            "toolName": "publishDocument",
            "input": {"documentId": "d"},
            "kind": "approval",
            "approvalId": "run_1::p1",
        },
        {"toolCallId": "s1", "toolName": "x", "input": {}, "kind": "client", "submittedAt": 5},
    ]
    ui = UIMessageStream("m")
    out = ui.pending(calls)
    assert [c["type"] for c in out] == [
        "start",
        "start-step",
        "tool-input-available",
        "tool-input-available",
        "tool-approval-request",
    ]
    assert all("providerExecuted" not in c for c in out)
    assert ui.seen_tool_call_ids == {"c1", "p1"}
    # Already sent: not again.
    assert ui.pending(calls) == []
    assert ui.finish("tool-calls") == [
        {"type": "finish-step"},
        {"type": "finish", "finishReason": "tool-calls"},
    ]
    assert ui.pending(calls) == []


def test_finish_without_events() -> None:
    assert UIMessageStream("m").finish() == [
        {"type": "start", "messageId": "m"},
        {"type": "start-step"},
        {"type": "finish-step"},
        {"type": "finish", "finishReason": "stop"},
    ]


def test_unknown_events_are_ignored() -> None:
    assert run([{"type": "other"}, ev("text_delta", 1, delta="")]) == []


def test_text_deltas_stream_live_and_the_text_closes_them() -> None:
    """A step's deltas open one text part; its recorded text ends it (with the rest, when the
    deltas stopped short)."""
    out = run(
        [
            ev("turn_start", 1),
            ev("text_delta", 2, delta="Hel", step=1),
            ev("text_delta", 3, delta="lo ", step=1),
            ev("text", 4, text="Hello world", step=1),
            ev("text_delta", 5, delta="x", step=2),
            ev("text", 6, text="x", step=2),
        ]
    )
    assert out[2:] == [
        {"type": "text-start", "id": "text_2"},
        {"type": "text-delta", "id": "text_2", "delta": "Hel"},
        {"type": "text-delta", "id": "text_2", "delta": "lo "},
        {"type": "text-delta", "id": "text_2", "delta": "world"},
        {"type": "text-end", "id": "text_2"},
        {"type": "text-start", "id": "text_5"},
        {"type": "text-delta", "id": "text_5", "delta": "x"},
        {"type": "text-end", "id": "text_5"},
    ]


def test_deltas_the_text_does_not_continue_are_closed_and_the_text_follows() -> None:
    """A retried step streamed other deltas: the live part ends, the recorded text follows."""
    out = run([ev("text_delta", 2, delta="Draft", step=1), ev("text", 3, text="Final", step=1)])
    assert out[2:] == [
        {"type": "text-start", "id": "text_2"},
        {"type": "text-delta", "id": "text_2", "delta": "Draft"},
        {"type": "text-end", "id": "text_2"},
        {"type": "text-start", "id": "text_3"},
        {"type": "text-delta", "id": "text_3", "delta": "Final"},
        {"type": "text-end", "id": "text_3"},
    ]


def test_an_open_live_part_is_closed_when_the_turn_ends() -> None:
    failed = run(
        [
            ev("text_delta", 2, delta="Hal", step=1),
            ev("turn_end", 3, outcome="failed", error={"message": "boom"}),
        ]
    )
    assert failed[2:] == [
        {"type": "text-start", "id": "text_2"},
        {"type": "text-delta", "id": "text_2", "delta": "Hal"},
        {"type": "text-end", "id": "text_2"},
        {"type": "error", "errorText": "boom"},
        {"type": "finish", "finishReason": "error"},
    ]
    interrupted = run(
        [ev("text_delta", 2, delta="Hal", step=1), ev("turn_end", 3, outcome="interrupted")]
    )
    assert [c["type"] for c in interrupted[2:]] == ["text-start", "text-delta", "text-end", "abort"]


def test_framing_and_headers() -> None:
    chunk = {"type": "text-delta", "id": "t", "delta": "a\nb"}
    frame = encode_chunk(chunk)
    assert frame.startswith(b"data: ") and frame.endswith(b"\n\n")
    assert frame.count(b"\n") == 2
    assert json.loads(frame[6:]) == chunk
    assert encode_chunks([chunk, chunk]) == frame * 2
    assert DONE == b"data: [DONE]\n\n"
    headers = {k.lower(): v for k, v in UI_MESSAGE_STREAM_HEADERS.items()}
    assert headers == {
        "cache-control": "no-cache",
        "connection": "keep-alive",
        "x-vercel-ai-ui-message-stream": "v1",
        "x-accel-buffering": "no",
    }


def test_a_message_delivered_over_pending_calls_opens_one_step() -> None:
    out = run(
        [
            ev("tool_end", 5, toolCallId="c1", toolName="t", error="client_tool_abandoned"),
            ev("user_message", 6, text="never mind"),
            ev("text", 7, text="OK."),
        ]
    )
    assert [c["type"] for c in out] == [
        "start",
        "start-step",
        "tool-output-error",
        "finish-step",
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
    ]
