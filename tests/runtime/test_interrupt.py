"""Interrupt and abort: a parked turn stops at once, late submits are refused, the next
message starts a clean turn."""

from __future__ import annotations

import asyncio

from dbos import DBOS
from pydantic import BaseModel

from helix_dbos.core.agents import define_agent
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.core.tools import define_tool
from helix_dbos.llm.scripted import ScriptedLLM, call, reply


class Ask(BaseModel):
    question: str


def script(request: LLMRequest) -> LLMResponse:
    users = [m for m in request.messages if m.role == "user"]
    last = request.messages[-1]
    if last.role == "user" and len(users) == 1:
        return call(request, ("ask_user", {"question": "color?"}))
    return reply(f"done after {len(request.messages)} messages")


async def test_probe(make_runtime) -> None:
    llm = ScriptedLLM(script)
    agent = define_agent("asker", llm=llm, tools=[define_tool("ask_user", "Ask", Ask, execute="client",
                                                             client_tool_timeout=300)])
    rt = await make_runtime([agent])
    h = await rt.start("asker", "hi")
    pend = await rt.wait_for_pending(h.session_id)
    print(pend)
    state = await rt.session(h.session_id)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await rt.interrupt(h.session_id)
    while rt.ctx.parked and loop.time() - t0 < 5:
        await asyncio.sleep(0.01)
    print("parked gone after", loop.time() - t0, rt.ctx.parked)
    st = await DBOS.get_workflow_status_async(state.workflow_id)
    print(st.status)
    print(await rt.status(h.session_id))
    ans = await rt.submit_tool_result(h.session_id, pend[0]["toolCallId"], result={"x": 1})
    print(ans)
    h2 = await rt.start("asker", "again", session_id=h.session_id)
    print(await rt.wait(h.session_id))
    for m in await rt.messages(h.session_id):
        print(m)
    print(llm.calls, [len(r.messages) for r in llm.requests])
