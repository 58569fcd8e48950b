"""Retry and rewind on Postgres and SQLite: each rule of docs/lifecycle.md, and each refusal."""

from __future__ import annotations

from typing import Any

import pytest
from dbos import DBOS

from helix_dbos.core.markers import entry_input_run, sub_agent_notification
from helix_dbos.core.session import SessionState
from helix_dbos.errors import (
    AgentAlreadyRunningError,
    AgentNotResumableError,
    RequestValidationError,
    SessionNotFoundError,
)
from helix_dbos.runtime import AgentRuntime
from helix_dbos.store.history import load_rows
from tests.runtime.lifecycle_agents import FAILING, LifecycleLLM, lifecycle_agent


@pytest.fixture(autouse=True)
def _failing() -> Any:
    FAILING["on"] = True
    yield
    FAILING["on"] = True


async def roles(rt: AgentRuntime, sid: str) -> list[str]:
    return [m.role for m in await rt.messages(sid)]


async def all_rows(rt: AgentRuntime, sid: str) -> list[Any]:
    async with rt.store.reading():
        return await load_rows(sid)


async def failed(rt: AgentRuntime, message: str) -> str:
    handle = await rt.start("lc", message)
    assert (await rt.wait(handle.session_id))["status"] == "failed"
    return handle.session_id


async def test_retry_before_any_step_reruns_its_own_input(make_runtime: Any) -> None:
    """Rule 2: the run committed no step. No message is needed: its own input row leaves the
    conversation (kept for audit) and is re-appended for the new run."""
    llm = LifecycleLLM()
    rt = await make_runtime([lifecycle_agent(llm)])
    sid = await failed(rt, "please fail")
    FAILING["on"] = False
    handle = await rt.retry(sid)
    assert (await rt.wait(sid))["status"] == "completed"
    history = await rt.messages(sid)
    assert [m.content for m in history] == ["please fail", "echo: please fail"]
    assert entry_input_run(history[0]) == handle.run_id
    rows = await all_rows(rt, sid)
    assert len(rows) == 3 and rows[0].rewound_at is not None  # the original, for audit
    assert (history[0].meta or {}).get("restoredFrom") == rows[0].message_id


async def test_retry_with_message_replaces_the_uncommitted_input(make_runtime: Any) -> None:
    rt = await make_runtime([lifecycle_agent()])
    sid = await failed(rt, "please fail")
    await rt.retry(sid, message="something else")
    assert (await rt.wait(sid))["status"] == "completed"
    assert [m.content for m in await rt.messages(sid)] == [
        "something else",
        "echo: something else",
    ]


async def test_retry_after_committed_steps_needs_a_message(make_runtime: Any) -> None:
    """Rule 3: the run committed a step (a server tool ran); a retry keeps it all and needs a
    message; without one it is refused typed and nothing is written."""
    rt = await make_runtime([lifecycle_agent()])
    sid = await failed(rt, "lookup and fail")
    before = await all_rows(rt, sid)
    with pytest.raises(RequestValidationError) as refused:
        await rt.retry(sid)
    assert refused.value.details["cause"] == "message"
    assert await all_rows(rt, sid) == before
    FAILING["on"] = False
    await rt.retry(sid, message="go on")
    assert (await rt.wait(sid))["status"] == "completed"
    assert await roles(rt, sid) == ["user", "assistant", "tool", "user", "assistant"]
    assert (await rt.messages(sid))[-1].content == "echo: go on"


async def test_retry_refusals(make_runtime: Any) -> None:
    """Rule 1: nothing to retry. Completed: state_not_resumable; parked: state_already_running;
    no session: state_not_found."""
    rt = await make_runtime([lifecycle_agent()])
    done = await rt.start("lc", "hello")
    await rt.wait(done.session_id)
    with pytest.raises(AgentNotResumableError):
        await rt.retry(done.session_id)
    parked = await rt.start("lc", "1 edit")
    await rt.wait_for_pending(parked.session_id)
    with pytest.raises(AgentAlreadyRunningError):
        await rt.retry(parked.session_id, message="x")
    with pytest.raises(SessionNotFoundError):
        await rt.retry("no-such-session")
    sid = await failed(rt, "please fail")
    with pytest.raises(SessionNotFoundError):
        await rt.retry(sid, checkpoint_id="cp_nope")


async def _fail_while_parked(
    rt: AgentRuntime, n: int, answer: int, stash: str | None = None
) -> tuple[str, list[str]]:
    """A turn parked on ``n`` calls, ``answer`` of them answered, whose run then failed with
    its pending calls (and a stashed message) still on the session."""
    handle = await rt.start("lc", f"{n} edits")
    calls = [c["toolCallId"] for c in await rt.wait_for_pending(handle.session_id, n)]
    state = await rt.session(handle.session_id)
    # Cancelled first: the answers below wake a workflow that can no longer commit them.
    await DBOS.cancel_workflow_async(state.workflow_id or "")
    for tcid in calls[:answer]:
        await rt.submit_tool_result(handle.session_id, tcid, result={"applied": 7})

    def fail(states: dict[str, SessionState]) -> None:
        s = states[handle.session_id]
        s.status = "failed"
        s.error = {"code": "state_conflict", "message": "the commit failed"}
        if stash is not None:
            s.metadata["entryInput"] = {"message": stash, "runId": s.run_id}

    await rt.store.update([handle.session_id], fail)
    return handle.session_id, calls


async def test_retry_with_message_drains_answered_calls_first(make_runtime: Any) -> None:
    """Rule 6: answered calls still pending get their results BEFORE the retry's message (an
    unanswered one is not_executed); a late submit to them is unknown_tool_call."""
    rt = await make_runtime([lifecycle_agent()])
    sid, calls = await _fail_while_parked(rt, 2, 1)
    await rt.retry(sid, message="go on")
    assert (await rt.wait(sid))["status"] == "completed"
    history = await rt.messages(sid)
    assert [m.role for m in history] == ["user", "assistant", "tool", "tool", "user", "assistant"]
    assert history[2].tool_call_id == calls[0] and history[2].result == {"applied": 7}
    assert history[3].tool_call_id == calls[1] and history[3].error_code == "not_executed"
    assert history[4].content == "go on"
    assert not (await rt.session(sid)).pending
    late = await rt.submit_tool_result(sid, calls[1], result={"applied": 1})
    assert late.status == "unknown_tool_call"


async def test_retry_drains_then_the_stashed_message(make_runtime: Any) -> None:
    """Rule 5: a message stashed on the session is never lost: the retry drains the answers,
    then commits the stashed message, with no message given; a given one replaces it."""
    rt = await make_runtime([lifecycle_agent()])
    sid, calls = await _fail_while_parked(rt, 1, 1, stash="the stashed one")
    await rt.retry(sid)
    assert (await rt.wait(sid))["status"] == "completed"
    history = await rt.messages(sid)
    assert [m.role for m in history] == ["user", "assistant", "tool", "user", "assistant"]
    assert history[3].content == "the stashed one"

    sid2, _ = await _fail_while_parked(rt, 1, 1, stash="the stashed one")
    await rt.retry(sid2, message="replacement")
    await rt.wait(sid2)
    assert [m.content for m in await rt.messages(sid2)][-2] == "replacement"


async def test_retry_of_a_failed_with_message_drain(make_runtime: Any) -> None:
    """Rule 4: with_message drained the batch and committed its marked message; the run then
    failed before any step. The retry needs no message: it rewinds to just before that row and
    re-appends it for the new run; the drained results stay before it."""
    llm = LifecycleLLM()
    rt = await make_runtime([lifecycle_agent(llm)])
    handle = await rt.start("lc", "1 edit")
    await rt.wait_for_pending(handle.session_id)
    await rt.resume(handle.session_id, "with_message", "now fail", abandon_pending=True)
    assert (await rt.wait(handle.session_id))["status"] == "failed"
    failed_run = (await rt.session(handle.session_id)).run_id
    marked = (await rt.messages(handle.session_id))[-1]
    assert entry_input_run(marked) == failed_run
    FAILING["on"] = False
    retried = await rt.retry(handle.session_id)
    assert (await rt.wait(handle.session_id))["status"] == "completed"
    history = await rt.messages(handle.session_id)
    assert [m.role for m in history] == ["user", "assistant", "tool", "user", "assistant"]
    assert history[2].error_code == "client_tool_abandoned"
    assert history[3].content == "now fail" and entry_input_run(history[3]) == retried.run_id
    assert sum(1 for r in await all_rows(rt, handle.session_id) if r.rewound_at) == 1


async def test_checkpoint_retry_skips_notifications(make_runtime: Any) -> None:
    """A sub-agent completion notification is never user input: a checkpoint retry whose later
    rows hold only a notification is refused; notifications are re-appended, never dropped."""
    rt = await make_runtime([lifecycle_agent()])
    sid = await failed(rt, "please fail")
    cps = await rt.checkpoints(sid)
    # The notification arrives after the failed run's rows.
    await rt.store.append_messages(sid, None, [sub_agent_notification("child done", "c1")])
    first = cps[-1]  # the oldest: the model step never committed, so the finish step
    with pytest.raises(RequestValidationError):
        # At the latest checkpoint, only the notification follows.
        latest = (await rt.checkpoints(sid))[0]
        assert latest["checkpointId"] == first["checkpointId"]
        await rt.retry(sid, checkpoint_id=latest["checkpointId"])
    FAILING["on"] = False
    await rt.retry(sid, message="again", checkpoint_id=first["checkpointId"])
    await rt.wait(sid)
    contents = [m.content for m in await rt.messages(sid)]
    assert contents == ["please fail", "child done", "again", "echo: again"]


async def test_checkpoints_listing_newest_first(make_runtime: Any) -> None:
    rt = await make_runtime([lifecycle_agent()])
    handle = await rt.start("lc", "1 edit")
    [call] = await rt.wait_for_pending(handle.session_id)
    await rt.submit_tool_result(handle.session_id, call["toolCallId"], result={"applied": 1})
    await rt.wait(handle.session_id)
    cps = await rt.checkpoints(handle.session_id)
    assert [c["kind"] for c in cps] == ["model", "results", "model"]
    assert [c["messageCount"] for c in cps] == [4, 3, 2]
    assert [c["step"] for c in cps] == [2, 1, 1]
    assert set(cps[0]) == {"checkpointId", "runId", "step", "createdAt", "messageCount", "kind"}
    with pytest.raises(SessionNotFoundError):
        await rt.checkpoints("nope")


async def test_rewind_to_a_partial_batch_suspends_again_without_a_model_call(
    make_runtime: Any,
) -> None:
    """The restored batch is still unanswered: the new run takes the calls over and suspends
    at once, with no model call and no invented result; answering them continues the turn."""
    llm = LifecycleLLM()
    rt = await make_runtime([lifecycle_agent(llm)])
    handle = await rt.start("lc", "2 edits")
    sid = handle.session_id
    calls = [c["toolCallId"] for c in await rt.wait_for_pending(sid, 2)]
    for tcid in calls:
        await rt.submit_tool_result(sid, tcid, result={"applied": 1})
    await rt.wait(sid)
    model_cp = [c for c in await rt.checkpoints(sid) if c["kind"] == "model"][-1]
    before = llm.calls
    rewound = await rt.resume(sid, "from_checkpoint", checkpoint_id=model_cp["checkpointId"])
    pending = await rt.wait_for_pending(sid, 2)
    assert [p["toolCallId"] for p in pending] == calls
    assert llm.calls == before, "no model call"
    assert await roles(rt, sid) == ["user", "assistant"]
    assert (await rt.session(sid)).run_id == rewound.run_id
    for tcid in calls:
        answer = await rt.submit_tool_result(sid, tcid, result={"applied": 3})
        assert answer.status == "accepted"
    assert (await rt.wait(sid))["status"] == "completed"
    history = await rt.messages(sid)
    assert [m.role for m in history] == ["user", "assistant", "tool", "tool", "assistant"]
    assert all(m.result == {"applied": 3} for m in history if m.role == "tool")
    assert llm.calls == before + 1


async def test_rewind_over_a_parked_turn_discards_its_calls(make_runtime: Any) -> None:
    """Rewinding a parked session to before its batch: the new run continues normally (a
    model call), and a late submit to a discarded call answers unknown_tool_call."""
    rt = await make_runtime([lifecycle_agent()])
    first = await rt.start("lc", "hello")
    sid = first.session_id
    await rt.wait(sid)
    ended_at = (await rt.checkpoints(sid))[0]
    await rt.start("lc", "1 edit", session_id=sid)
    [call] = await rt.wait_for_pending(sid)
    await rt.rewind(sid, ended_at["checkpointId"])
    # That checkpoint ends with the model's final reply: the session is back there, ended.
    assert (await rt.session(sid)).status == "completed"
    assert [m.content for m in await rt.messages(sid)] == ["hello", "echo: hello"]
    late = await rt.submit_tool_result(sid, call["toolCallId"], result={"applied": 1})
    assert late.status == "unknown_tool_call"
    # The conversation goes on from there.
    await rt.start("lc", "again", session_id=sid)
    await rt.wait(sid)
    assert [m.content for m in await rt.messages(sid)][-2:] == ["again", "echo: again"]


async def test_rewind_to_results_continues_with_a_model_call(make_runtime: Any) -> None:
    rt = await make_runtime([lifecycle_agent()])
    handle = await rt.start("lc", "1 edit")
    sid = handle.session_id
    [call] = await rt.wait_for_pending(sid)
    await rt.submit_tool_result(sid, call["toolCallId"], result={"applied": 5})
    await rt.wait(sid)
    results = next(c for c in await rt.checkpoints(sid) if c["kind"] == "results")
    await rt.rewind(sid, results["checkpointId"])
    assert (await rt.wait(sid))["status"] == "completed"
    assert await roles(rt, sid) == ["user", "assistant", "tool", "assistant"]
    rows = await all_rows(rt, sid)
    assert sum(1 for r in rows if r.rewound_at) == 1  # the first final reply, for audit
    # Rewinding forward again restores the rewound reply as a copy.
    latest_old = [c for c in await rt.checkpoints(sid) if c["kind"] == "model"]
    assert all(c["messageCount"] in (2, 4) for c in latest_old)


async def test_rewind_refusals(make_runtime: Any) -> None:
    rt = await make_runtime([lifecycle_agent()])
    handle = await rt.start("lc", "hello")
    await rt.wait(handle.session_id)
    with pytest.raises(SessionNotFoundError):
        await rt.rewind(handle.session_id, "cp_missing")
    with pytest.raises(RequestValidationError):
        await rt.resume(handle.session_id, "from_checkpoint")
    with pytest.raises(SessionNotFoundError):
        await rt.rewind("nope", "cp")


async def test_cli_checkpoints(make_runtime: Any, db_url: str) -> None:
    """``helix-dbos checkpoints SESSION [--json]`` shows what ``checkpoints`` returns."""
    import asyncio
    import contextlib
    import io
    import json

    from helix_dbos.cli import main

    rt = await make_runtime([lifecycle_agent()])
    handle = await rt.start("lc", "hello")
    await rt.wait(handle.session_id)
    expected = await rt.checkpoints(handle.session_id)

    def run(*extra: str) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["checkpoints", handle.session_id, "--database-url", db_url, *extra])
        assert code == 0
        return out.getvalue()

    assert json.loads(await asyncio.to_thread(run, "--json")) == expected
    table = await asyncio.to_thread(run)
    assert expected[0]["checkpointId"] in table


def test_checkpoint_ids_go_below_their_rows_when_the_table_is_too_wide() -> None:
    """Ids of about 110 characters: in 80 columns every row fits and its id follows on a line
    of its own, whole; where the table fits, it is one line a row, the id last."""
    from helix_dbos.cli.sessions import render_checkpoints

    long_id = "helix:ses_" + "a" * 24 + ":run_" + "b" * 24 + ":run_" + "c" * 24 + ":12:hibernate"
    rows: list[dict[str, Any]] = [
        {
            "checkpointId": long_id,
            "kind": "results",
            "runId": "run_" + "b" * 24,
            "step": 12,
            "messageCount": 31,
            "createdAt": "2026-12-06T07:20:11.123+00:00",
        },
        {
            "checkpointId": "cp_short",
            "kind": "model",
            "runId": None,
            "step": 1,
            "messageCount": 2,
            "createdAt": "2026-12-06T07:19:11.123+00:00",
        },
    ]
    narrow = render_checkpoints(rows, 80).splitlines()
    assert len(long_id) > 100
    assert all(len(line) <= 80 for line in narrow if line.strip() not in (long_id, "cp_short"))
    assert narrow[0].split() == ["CREATED", "(UTC)", "KIND", "RUN", "STEP", "MESSAGES"]
    assert narrow[2] == f"    {long_id}" and narrow[4] == "    cp_short"
    assert narrow[3].split() == ["2026-12-06", "07:19:11", "model", "-", "1", "2"]
    wide = render_checkpoints(rows, 400).splitlines()
    assert len(wide) == 3 and wide[0].split()[-1] == "CHECKPOINT"
    assert wide[1].endswith(long_id) and wide[2].endswith("cp_short")
