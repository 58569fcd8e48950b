"""Classifying a model step's calls (``plan_calls``): where each runs, what the turn parks on."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from helix_dbos.core import DefaultResult
from helix_dbos.core.agents import DEFAULT_CLIENT_TOOL_TIMEOUT, Agent, define_agent
from helix_dbos.core.messages import ToolCall
from helix_dbos.llm.scripted import ScriptedLLM, reply
from helix_dbos.runtime._triage import SUSPENDING_KINDS, plan_calls
from tests.support.builders import client_tool, scripted_agent, server_tool

CHILD = define_agent("child", llm=ScriptedLLM(lambda request: reply("done")))


def agent(**options: Any) -> Agent:
    """``edit`` (client), ``lookup`` (server), ``pay`` (approval) and the ``child`` sub-agent."""
    return scripted_agent(
        [client_tool("edit"), server_tool("lookup"), server_tool("pay", require_approval=True)],
        subagents=(CHILD,),
        **options,
    )


def one(agent_: Agent, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    [item] = plan_calls(agent_, [ToolCall(id="c1", name=name, input=arguments)])
    return dict(item)


def test_each_kind_of_call() -> None:
    """Server calls run, client and approval calls wait with the deadline, a sub-agent call
    names its agent."""
    plan = agent()
    assert one(plan, "lookup", {"text": "a"}) == {
        "toolCallId": "c1",
        "toolName": "lookup",
        "input": {"text": "a"},
        "index": 0,
        "kind": "server",
    }
    assert one(plan, "edit", {"text": "a"})["kind"] == "client"
    assert one(plan, "edit", {"text": "a"})["timeoutSeconds"] == DEFAULT_CLIENT_TOOL_TIMEOUT
    assert one(plan, "pay", {"text": "a"})["kind"] == "approval"
    assert "timeoutSeconds" in one(plan, "pay", {"text": "a"})
    child = one(plan, "subagent__child", {"message": "go"})
    assert (child["kind"], child["subagent"]) == ("subagent", "child")
    assert "timeoutSeconds" not in child


def test_an_unknown_tool_is_invalid_and_says_so() -> None:
    """It never runs; the model reads why."""
    item = one(agent(), "delete_everything", {})
    assert item["kind"] == "invalid"
    assert item["error"] == "Unknown tool 'delete_everything'"


def test_bad_arguments_make_any_call_invalid() -> None:
    """Checked against the tool's input model before anything else: a client call with bad
    arguments never parks the turn, an approval is never shown, a sub-agent never starts."""
    cases: list[tuple[str, dict[str, Any]]] = [
        ("edit", {"text": 5}),
        ("pay", {}),
        ("lookup", {"text": ["a"]}),
        ("subagent__child", {"msg": "go"}),
    ]
    for name, arguments in cases:
        item = one(agent(), name, arguments)
        assert item["kind"] == "invalid", name
        assert item["error"].startswith(f"Invalid arguments for {name!r}: ")
        assert "timeoutSeconds" not in item


def test_the_plan_keeps_the_arguments_as_the_model_sent_them() -> None:
    """Validation does not rewrite the input (an extra key is kept, nothing is coerced)."""
    arguments = {"text": "a", "extra": 1}
    assert one(agent(), "edit", arguments)["input"] == {"text": "a", "extra": 1}


def test_the_deadline_falls_back_tool_then_agent() -> None:
    """A waiting call carries its tool's deadline, else the agent's."""
    agent_ = scripted_agent(
        [client_tool("edit", client_tool_timeout=7), client_tool("ask")], client_tool_timeout=30
    )
    assert one(agent_, "edit", {"text": "a"})["timeoutSeconds"] == 7
    assert one(agent_, "ask", {"text": "a"})["timeoutSeconds"] == 30


def test_policy_and_reminder_only_when_the_tool_has_them() -> None:
    """``onTimeout`` and ``remindBefore`` are recorded for the tools that set them, never as
    empty keys for the others."""
    agent_ = scripted_agent(
        [
            client_tool("edit", on_timeout=DefaultResult({"ok": True}), remind_before=10),
            server_tool("pay", require_approval=True, on_timeout="deny"),
            client_tool("ask"),
        ]
    )
    edit = one(agent_, "edit", {"text": "a"})
    assert edit["onTimeout"] == {"action": "result", "result": {"ok": True}}
    assert edit["remindBefore"] == 10.0
    pay = one(agent_, "pay", {"text": "a"})
    assert pay["onTimeout"] == {"action": "deny"}
    assert "remindBefore" not in pay
    ask = one(agent_, "ask", {"text": "a"})
    assert "onTimeout" not in ask and "remindBefore" not in ask


NAMES = ["edit", "lookup", "pay", "subagent__child", "unknown"]
KIND_OF = {"edit": "client", "lookup": "server", "pay": "approval", "subagent__child": "subagent"}
VALID = {"edit": {"text": "a"}, "lookup": {"text": "a"}, "pay": {"text": "a"}}
VALID["subagent__child"] = {"message": "go"}

calls = st.lists(st.tuples(st.sampled_from(NAMES), st.booleans()), max_size=8)


@given(calls)
def test_every_call_is_planned_once_in_the_model_order(drawn: list[tuple[str, bool]]) -> None:
    """One item per call, ``index`` its position, its kind from its tool and its arguments
    alone (a neighbour never changes it), and only waiting kinds carry a deadline."""
    batch = [
        ToolCall(id=f"c{i}", name=name, input=VALID.get(name, {}) if valid else {"bad": 1})
        for i, (name, valid) in enumerate(drawn)
    ]
    plan = plan_calls(agent(), batch)
    assert [(p["toolCallId"], p["index"]) for p in plan] == [
        (f"c{i}", i) for i in range(len(batch))
    ]
    for item, (name, valid) in zip(plan, drawn, strict=True):
        expected = KIND_OF[name] if valid and name in KIND_OF else "invalid"
        assert item["kind"] == expected
        assert ("timeoutSeconds" in item) == (expected in SUSPENDING_KINDS)
