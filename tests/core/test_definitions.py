"""Declaring tools and agents: typed refusals at definition time, deadline fallbacks."""

from __future__ import annotations

import math

import pytest
from pydantic import BaseModel

from helix_dbos.core import RESERVED_TOOL_NAME_PREFIXES, AgentRegistry, define_agent, define_tool
from helix_dbos.core.agents import DEFAULT_CLIENT_TOOL_TIMEOUT
from helix_dbos.errors import AgentNotFoundError, ToolDefinitionError
from helix_dbos.llm.scripted import ScriptedLLM, reply


class In(BaseModel):
    x: int


class Out(BaseModel):
    y: int


LLM = ScriptedLLM(lambda request: reply("ok"))


def test_reserved_prefixes_are_exported_and_refused() -> None:
    """Names starting with subagent__ or companion__ are refused with a typed error."""
    assert RESERVED_TOOL_NAME_PREFIXES == ("subagent__", "companion__")
    for prefix in RESERVED_TOOL_NAME_PREFIXES:
        with pytest.raises(ToolDefinitionError) as exc:
            define_tool(f"{prefix}x", "d", In, Out, execute="client")
        assert exc.value.code == "config_error"


def test_client_tool_cannot_finish_with() -> None:
    """A client tool that is also finish_with is refused."""
    with pytest.raises(ToolDefinitionError):
        define_tool("t", "d", In, Out, execute="client", finish_with=True)


def test_bad_timeouts_are_refused() -> None:
    """A tool or agent deadline must be > 0 seconds."""
    with pytest.raises(ToolDefinitionError):
        define_tool("t", "d", In, Out, execute="client", client_tool_timeout=0)
    with pytest.raises(ToolDefinitionError):
        define_agent("a", llm=LLM, client_tool_timeout=-1)


@pytest.mark.parametrize("retention", [-1, math.inf, math.nan])
def test_tombstone_retention_must_be_finite_and_not_negative(retention: float) -> None:
    """completed_tombstone_retention must be a finite number >= 0."""
    with pytest.raises(ToolDefinitionError):
        define_agent("a", llm=LLM, completed_tombstone_retention=retention)


def test_tombstone_retention_zero_turns_it_off() -> None:
    """0 is allowed (retention off); the default is 24 h."""
    assert (
        define_agent("a", llm=LLM, completed_tombstone_retention=0).completed_tombstone_retention
        == 0
    )
    assert define_agent("a", llm=LLM).completed_tombstone_retention == 24 * 3600


def test_deadline_falls_back_tool_then_agent_then_five_minutes() -> None:
    """The client deadline comes from the tool, else the agent, else 5 minutes."""
    with_own = define_tool("own", "d", In, Out, execute="client", client_tool_timeout=7)
    plain = define_tool("plain", "d", In, Out, execute="client")
    agent = define_agent("a", llm=LLM, tools=[with_own, plain], client_tool_timeout=30)
    assert agent.deadline_seconds(with_own) == 7
    assert agent.deadline_seconds(plain) == 30
    bare = define_agent("b", llm=LLM, tools=[plain])
    assert bare.deadline_seconds(plain) == DEFAULT_CLIENT_TOOL_TIMEOUT == 300


def test_subagents_become_reserved_tools_and_register() -> None:
    """A sub-agent becomes a framework-built subagent__<name> tool; the registry finds both."""
    child = define_agent("child", llm=LLM)
    parent = define_agent("parent", llm=LLM, subagents=[child])
    assert parent.tool("subagent__child") is not None
    registry = AgentRegistry([parent])
    assert registry.get("child") is child
    with pytest.raises(AgentNotFoundError):
        registry.get("nope")


def test_tool_schema_comes_from_the_input_model() -> None:
    """The model sees the pydantic input model's JSON schema."""
    tool = define_tool("t", "desc", In, Out, execute="client")
    schema = tool.schema()
    assert schema.input_schema["properties"]["x"]["type"] == "integer"
    assert tool.suspends
