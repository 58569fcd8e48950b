"""Agents for the observability tests (importable by child processes, too).

The scripted model reads the session's first user message as a plan: ``"pick_color confirm"``
calls ``pick_color``, then ``confirm``, one per step, and then replies ``done``. A message
``"delegate:<plan>"`` hands ``<plan>`` to the ``ops`` sub-agent.
"""

from __future__ import annotations

from pydantic import BaseModel

from helix_dbos.core.agents import Agent, define_agent
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.core.tools import define_tool
from helix_dbos.llm.scripted import ScriptedLLM, call, reply

__all__ = ["agents", "make_agents", "plan_script"]


class ColorInput(BaseModel):
    palette: str = "warm"


class ColorOutput(BaseModel):
    color: str


class ConfirmInput(BaseModel):
    question: str = "Proceed?"


class ConfirmOutput(BaseModel):
    ok: bool


def plan_script(request: LLMRequest) -> LLMResponse:
    """Call the planned tools one per step, then reply with what the tools answered."""
    users = [m for m in request.messages if m.role == "user"]
    plan = users[-1].content if users else ""
    start = max(i for i, m in enumerate(request.messages) if m.role == "user") if users else 0
    since = request.messages[start + 1 :]
    done = [m for m in since if m.role == "tool"]
    if plan.startswith("delegate:"):
        if not done:
            return call(request, ("subagent__ops", {"message": plan.removeprefix("delegate:")}))
        return reply("delegated: " + done[-1].content)
    steps = plan.split()
    if len(done) < len(steps):
        name = steps[len(done)]
        args = {"palette": "warm"} if name == "pick_color" else {"question": "Proceed?"}
        return call(request, (name, args))
    return reply("done: " + " | ".join(m.content for m in done))


def make_agents(timeout: float = 30.0, fast_timeout: float = 2.0) -> tuple[Agent, ...]:
    """``ops`` (client deadline ``timeout``), ``ops_fast`` (``fast_timeout``) and ``lead``."""
    pick_color = define_tool(
        "pick_color",
        "The user picks a color in the client.",
        ColorInput,
        ColorOutput,
        execute="client",
    )
    confirm = define_tool(
        "confirm",
        "The user confirms in the client.",
        ConfirmInput,
        ConfirmOutput,
        execute="client",
    )
    ops = define_agent(
        "ops",
        llm=ScriptedLLM(plan_script),
        tools=[pick_color, confirm],
        client_tool_timeout=timeout,
    )
    fast = define_agent(
        "ops_fast",
        llm=ScriptedLLM(plan_script),
        tools=[pick_color, confirm],
        client_tool_timeout=fast_timeout,
    )
    lead = define_agent("lead", llm=ScriptedLLM(plan_script), subagents=[ops])
    return ops, fast, lead


def agents() -> tuple[Agent, ...]:
    """The default set (for child processes)."""
    return make_agents()
