"""A small AG-UI client on the ``ag-ui-protocol`` models, for the Python tests.

``AguiThread`` keeps a thread's messages the way ``HttpAgent`` does (assistant text, tool calls
and their arguments, tool results from the stream; the client's own tool messages) and sends
each run as a ``RunAgentInput``. Every event of an answer is parsed with the package's ``Event``
union, so a stream that the models refuse fails the test.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    Event,
    FunctionCall,
    Message,
    ResumeEntry,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    TextMessageContentEvent,
    TextMessageStartEvent,
    Tool,
    ToolCall,
    ToolCallArgsEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
)
from pydantic import TypeAdapter

EVENT: TypeAdapter[Any] = TypeAdapter(Event)


def parse_stream(text: str) -> list[BaseEvent]:
    """Every ``data:`` frame of an SSE body, as an AG-UI event model."""
    out: list[BaseEvent] = []
    for block in text.split("\n\n"):
        data = [line[6:] for line in block.splitlines() if line.startswith("data: ")]
        if data:
            out.append(EVENT.validate_json("\n".join(data)))
    return out


@dataclass
class Run:
    """One run's answer: its events, and what they say."""

    events: list[BaseEvent]

    @property
    def types(self) -> list[str]:
        return [e.type.value for e in self.events]

    @property
    def last(self) -> BaseEvent:
        return self.events[-1]

    @property
    def outcome(self) -> Any:
        assert isinstance(self.last, RunFinishedEvent), self.last
        return self.last.outcome

    @property
    def error(self) -> RunErrorEvent:
        assert isinstance(self.last, RunErrorEvent), self.last
        return self.last

    @property
    def error_meta(self) -> dict[str, Any]:
        """The ``RUN_ERROR``'s metadata: our error's details (``retryable``, ``cause``, ...)."""
        return self.error.metadata or {}

    @property
    def text(self) -> str:
        return "".join(e.delta for e in self.events if isinstance(e, TextMessageContentEvent))

    def of(self, kind: type[Any]) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]


@dataclass
class AguiThread:
    """One thread of an agent, as a client sees it."""

    http: httpx.AsyncClient
    url: str
    thread_id: str = field(default_factory=lambda: f"thr_{uuid.uuid4().hex}")
    headers: dict[str, str] = field(default_factory=dict)
    tools: list[Tool] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    last_body: dict[str, Any] = field(default_factory=dict)

    def say(self, text: str) -> None:
        self.messages.append(UserMessage(id=f"u_{uuid.uuid4().hex[:8]}", content=text))

    def answer(self, tool_call_id: str, output: Any = None, *, error: str | None = None) -> None:
        """The client's result of a frontend tool call, as HttpAgent's app adds it."""
        self.messages.append(
            ToolMessage(
                id=f"t_{uuid.uuid4().hex[:8]}",
                tool_call_id=tool_call_id,
                content=json.dumps(output) if error is None else "",
                error=error,
            )
        )

    def body(self, resume: list[ResumeEntry] | None = None) -> dict[str, Any]:
        run = RunAgentInput(
            thread_id=self.thread_id,
            run_id=f"run_{uuid.uuid4().hex[:8]}",
            state={},
            messages=self.messages,
            tools=self.tools,
            context=[],
            forwarded_props={},
            resume=resume,
        )
        return run.model_dump(mode="json", by_alias=True)

    async def post(self, body: dict[str, Any]) -> httpx.Response:
        return await self.http.post(self.url, json=body, headers=self.headers)

    async def run(
        self, resume: list[ResumeEntry] | None = None, *, body: dict[str, Any] | None = None
    ) -> Run:
        """POST one run (``body``, else the thread's next input); its events, applied to
        ``messages`` as a client applies them. ``last_body`` is what was sent."""
        self.last_body = body or self.body(resume)
        response = await self.post(self.last_body)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("text/event-stream")
        run = Run(parse_stream(response.text))
        assert run.types[0] == "RUN_STARTED", run.types
        assert run.types[-1] in ("RUN_FINISHED", "RUN_ERROR"), run.types
        self._apply(run.events)
        return run

    def _apply(self, events: list[BaseEvent]) -> None:
        calls: dict[str, ToolCall] = {}
        for event in events:
            if isinstance(event, TextMessageStartEvent):
                self.messages.append(AssistantMessage(id=event.message_id, content=""))
            elif isinstance(event, TextMessageContentEvent):
                message = next(m for m in self.messages if m.id == event.message_id)
                assert isinstance(message, AssistantMessage)
                message.content = (message.content or "") + event.delta
            elif isinstance(event, ToolCallStartEvent):
                call = ToolCall(
                    id=event.tool_call_id,
                    function=FunctionCall(name=event.tool_call_name, arguments=""),
                )
                calls[call.id] = call
                self.messages.append(AssistantMessage(id=f"a_{call.id}", tool_calls=[call]))
            elif isinstance(event, ToolCallArgsEvent):
                calls[event.tool_call_id].function.arguments += event.delta
            elif isinstance(event, ToolCallResultEvent):
                self.messages.append(
                    ToolMessage(
                        id=event.message_id, tool_call_id=event.tool_call_id, content=event.content
                    )
                )
