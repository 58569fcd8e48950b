"""Builders of the framework's data, with defaults a test overrides only where it matters."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from helix_dbos.core.agents import Agent, define_agent
from helix_dbos.core.session import CallKind, PendingCall, SessionState
from helix_dbos.core.tools import Tool, define_tool
from helix_dbos.llm.scripted import ScriptedLLM, reply

#: When the calls below were registered, and how long they wait (epoch ms).
REGISTERED_AT = 1_000_000
WAIT_MS = 60_000


def pending_call(
    tool_call_id: str = "call_1",
    *,
    kind: CallKind = "client",
    run_id: str = "run_1",
    index: int = 0,
    tool_name: str = "edit",
    submitted_at: int | None = None,
    response: dict[str, Any] | None = None,
    on_timeout: dict[str, Any] | None = None,
    **fields: Any,
) -> PendingCall:
    """A pending entry registered at ``REGISTERED_AT``, due ``WAIT_MS`` later."""
    values: dict[str, Any] = {
        "tool_call_id": tool_call_id,
        "tool_name": tool_name,
        "input": {"text": "x"},
        "run_id": run_id,
        "kind": kind,
        "index": index,
        "deadline_at": REGISTERED_AT + WAIT_MS,
        "registered_at": REGISTERED_AT,
        "completed_retention_ms": 86_400_000,
        "submitted_at": submitted_at,
        "response": response,
        "on_timeout": on_timeout,
    }
    if kind == "approval":
        values["approval_id"] = f"{run_id}::{tool_call_id}"
    values.update(fields)
    return PendingCall(**values)


def session_state(
    session_id: str = "ses_1", root: str | None = None, **fields: Any
) -> SessionState:
    """A session row of the agent ``editor`` (a root unless ``root`` names another)."""
    return SessionState(
        session_id=session_id,
        agent_type="editor",
        root_session_id=root or session_id,
        **fields,
    )


class TextInput(BaseModel):
    """The input of the test tools below."""

    text: str


def _run(args: TextInput) -> str:
    return args.text


def scripted_agent(
    tools: list[Tool], *, subagents: tuple[Agent, ...] = (), **options: Any
) -> Agent:
    """An agent whose model always replies ``ok`` (the tests read its definition only)."""
    return define_agent(
        "editor",
        llm=ScriptedLLM(lambda request: reply("ok")),
        tools=tools,
        subagents=subagents,
        **options,
    )


def client_tool(name: str = "edit", **options: Any) -> Tool:
    """A client tool taking ``TextInput``."""
    return define_tool(name, "A client tool", TextInput, execute="client", **options)


def server_tool(name: str = "lookup", **options: Any) -> Tool:
    """A server tool taking ``TextInput`` (behind an approval with ``require_approval``)."""
    return define_tool(name, "A server tool", TextInput, execute=_run, **options)
