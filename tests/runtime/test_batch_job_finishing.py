"""Where a batch's job goes after its results commit (ARCHITECTURE.md, rule 20): it starts
the next model step only where the turn would call the model next. A successful call of a
``finish_with`` tool ends the turn with that call's output, and no model step follows; a
failed one, or a tool that does not finish, leaves the turn to go on.

``batch_job.finishing`` is that decision, taken by the job and by the turn alike.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from helix_dbos.core import define_agent, define_tool
from helix_dbos.core.agents import Agent
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.llm.scripted import ScriptedLLM, call, reply

from .conftest import MakeRuntime


class Verdict(BaseModel):
    text: str


def conclude(args: Verdict) -> dict[str, Any]:
    if args.text == "broken":
        raise RuntimeError("the verdict could not be filed")
    return {"filed": args.text}


def note(args: Verdict) -> dict[str, Any]:
    return {"noted": args.text}


def script(request: LLMRequest) -> LLMResponse:
    """The user's message names the calls of the first step, ``tool:text`` separated by
    spaces; once the tools answered, the model replies with how many results it saw."""
    last = request.messages[-1]
    if last.role == "user":
        calls = [tuple(word.split(":", 1)) for word in last.content.split()]
        return call(request, *[(name, {"text": text}) for name, text in calls])
    seen = [m for m in request.messages if m.role == "tool"]
    return reply(f"went on after {len(seen)}")


def judge(llm: ScriptedLLM) -> Agent:
    return define_agent(
        "judge",
        llm=llm,
        tools=[
            define_tool(
                "conclude", "File the verdict", Verdict, execute=conclude, finish_with=True
            ),
            define_tool("note", "Take a note", Verdict, execute=note),
        ],
    )


async def _run(make_runtime: MakeRuntime, message: str) -> tuple[dict[str, Any], ScriptedLLM]:
    llm = ScriptedLLM(script)
    runtime = await make_runtime([judge(llm)])
    handle = await runtime.start("judge", message)
    outcome = await handle.result()
    return dict(outcome), llm


async def test_a_successful_finish_with_call_ends_the_turn_with_its_output(
    make_runtime: MakeRuntime,
) -> None:
    """The turn ends completed with the call's output, and the model is not called again."""
    outcome, llm = await _run(make_runtime, "note:first conclude:guilty")
    assert outcome["outcome"] == "completed"
    assert outcome["output"] == {"filed": "guilty"}
    assert llm.calls == 1


async def test_a_failed_finish_with_call_lets_the_turn_go_on(make_runtime: MakeRuntime) -> None:
    """A ``finish_with`` call that failed ends nothing: the model is called with its error."""
    outcome, llm = await _run(make_runtime, "conclude:broken")
    assert outcome["outcome"] == "completed"
    assert outcome["text"] == "went on after 1"
    assert outcome.get("output") is None
    assert llm.calls == 2


async def test_a_batch_without_a_finish_with_call_goes_on(make_runtime: MakeRuntime) -> None:
    """Results of tools that do not finish: the next model step runs."""
    outcome, llm = await _run(make_runtime, "note:a note:b")
    assert outcome["outcome"] == "completed"
    assert outcome["text"] == "went on after 2"
    assert llm.calls == 2
