"""The ``banker`` agent: ``transfer`` (a server tool behind an approval, 300 s to decide),
``quick_transfer`` (the same, 2 s to decide) and ``confirm`` (a client call), on a ``Bank``
that records each transfer it runs."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from helix_dbos.core.agents import define_agent
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.core.tools import define_tool
from helix_dbos.llm.scripted import ScriptedLLM, call, reply

#: What ``script`` asks ``transfer`` (and ``quick_transfer``) to move.
ARGS = {"amount": 40, "to": "alice"}


class Transfer(BaseModel):
    amount: int = Field(default=1, gt=0)
    to: str = "treasury"


class Confirm(BaseModel):
    question: str


class Confirmed(BaseModel):
    ok: bool


class Bank:
    """The gated tool's body; counts executions and keeps their arguments."""

    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []

    def transfer(self, args: Transfer) -> dict[str, Any]:
        self.runs.append(args.model_dump())
        return {"transferred": args.amount, "to": args.to}


def script(request: LLMRequest) -> LLMResponse:
    """'pay' calls the gated tool; 'pay and confirm' also asks the client in the same batch;
    any tool result is echoed back in the final reply."""
    last = request.messages[-1]
    if last.role == "user" and last.content == "pay":
        return call(request, ("transfer", ARGS))
    if last.role == "user" and last.content == "pay quickly":
        return call(request, ("quick_transfer", ARGS))
    if last.role == "user" and last.content == "pay and confirm":
        return call(request, ("confirm", {"question": "sure?"}), ("transfer", ARGS))
    tools = [m for m in request.messages if m.role == "tool"]
    return reply(" | ".join(f"{m.error_code or 'ok'}: {m.content}" for m in tools))


def banker(bank: Bank, llm: ScriptedLLM) -> Any:
    """The ``banker`` agent on ``llm`` (``script`` for the usual answers), running ``bank``."""
    return define_agent(
        "banker",
        llm=llm,
        tools=[
            define_tool(
                "transfer",
                "Move money",
                Transfer,
                execute=bank.transfer,
                require_approval=True,
                client_tool_timeout=300,
            ),
            define_tool(
                "quick_transfer",
                "Move money, if approved within 2 s",
                Transfer,
                execute=bank.transfer,
                require_approval=True,
                client_tool_timeout=2.0,  # seconds: the test sees it pending before it lapses
            ),
            define_tool(
                "confirm",
                "Ask the user",
                Confirm,
                Confirmed,
                execute="client",
                client_tool_timeout=300,
            ),
        ],
    )
