"""``define_tool``'s ``on_timeout`` and ``remind_before``: checked when the tool is defined,
recorded in the form the pending entry keeps, and carried into the plan of a call."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from helix_dbos.core import DefaultResult, define_agent, define_tool
from helix_dbos.core.messages import ToolCall
from helix_dbos.errors import ToolDefinitionError
from helix_dbos.llm.scripted import ScriptedLLM, reply
from helix_dbos.runtime._triage import plan_calls


class In(BaseModel):
    text: str


class Out(BaseModel):
    choice: str


def run(_: In) -> str:
    return "ok"


def client(**options: Any) -> Any:
    return define_tool("ask", "Ask", In, Out, execute="client", **options)


def gate(**options: Any) -> Any:
    return define_tool("pay", "Pay", In, execute=run, require_approval=True, **options)


def test_policies_are_recorded_as_the_pending_entry_keeps_them() -> None:
    assert client().on_timeout is None and gate().on_timeout is None
    assert client(on_timeout="error").on_timeout is None
    assert gate(on_timeout="deny").on_timeout == {"action": "deny"}
    assert gate(on_timeout="approve").on_timeout == {"action": "approve"}
    # A pydantic default is stored as its JSON.
    assert client(on_timeout=DefaultResult(Out(choice="later"))).on_timeout == {
        "action": "result",
        "result": {"choice": "later"},
    }
    assert client(on_timeout=DefaultResult({"choice": "x"})).on_timeout == {
        "action": "result",
        "result": {"choice": "x"},
    }


@pytest.mark.parametrize(
    ("make", "options", "says"),
    [
        (client, {"on_timeout": "deny"}, "approval gate"),
        (client, {"on_timeout": "approve"}, "approval gate"),
        (gate, {"on_timeout": DefaultResult({"choice": "x"})}, "client tool"),
        (client, {"on_timeout": "later"}, "must be"),
        (client, {"on_timeout": DefaultResult({"choice": 3})}, "output model"),
        (client, {"on_timeout": DefaultResult({"no": "choice"})}, "output model"),
        (client, {"on_timeout": DefaultResult(float("nan"))}, "JSON"),
        (client, {"on_timeout": DefaultResult(object())}, "JSON"),
        (client, {"remind_before": 0}, "> 0"),
        (client, {"remind_before": -1}, "> 0"),
        (client, {"remind_before": float("inf")}, "> 0"),
        (client, {"remind_before": "5"}, "number"),
        (client, {"remind_before": True}, "number"),
        (client, {"remind_before": 10, "client_tool_timeout": 10}, "shorter"),
        (gate, {"remind_before": 60, "client_tool_timeout": 30}, "shorter"),
    ],
)
def test_bad_options_are_refused_when_the_tool_is_defined(
    make: Any, options: dict[str, Any], says: str
) -> None:
    with pytest.raises(ToolDefinitionError) as refused:
        make(**options)
    assert says in refused.value.message


def test_a_tool_that_never_waits_takes_neither_option() -> None:
    for options in ({"on_timeout": "error"}, {"on_timeout": "deny"}, {"remind_before": 5}):
        with pytest.raises(ToolDefinitionError) as refused:
            define_tool("calc", "Compute", In, execute=run, **options)
        assert "waits" in refused.value.message


def test_the_plan_carries_policy_and_reminder_of_waiting_calls() -> None:
    tools = [
        gate(on_timeout="deny", remind_before=30, client_tool_timeout=60),
        client(),
        define_tool("calc", "Compute", In, execute=run),
    ]
    agent = define_agent("a", llm=ScriptedLLM(lambda r: reply("x")), tools=tools)
    calls = [
        ToolCall(id=f"c{i}", name=n, input={"text": "t"})
        for i, n in enumerate(["pay", "ask", "calc"])
    ]
    paid, asked, computed = plan_calls(agent, calls)
    assert paid["onTimeout"] == {"action": "deny"} and paid["remindBefore"] == 30.0
    assert paid["timeoutSeconds"] == 60
    assert "onTimeout" not in asked and "remindBefore" not in asked
    assert computed["kind"] == "server" and "onTimeout" not in computed
