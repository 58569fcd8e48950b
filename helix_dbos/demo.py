"""Demo agents on the scripted model: they run without a network or an API key.

``editor`` edits the user's document by asking the client to apply edits (the client tool
``editContent``), then says how many edits were applied. When the message asks to publish, it
then calls ``publishDocument``, a server tool that runs only after a human approves it, and
reports the outcome. Failures (a client error, a deadline, a denial) are reported in words.

Message conventions the script understands (``UNDERSTOOD`` is the reply to any other message;
the document is never touched then)::

    replace "old" with "new"      one edit per such phrase
    publish [document <id>]       publish afterwards (document id ``doc-1`` unless named);
                                  alone, publish the document as it is
    review <anything>             ask the ``reviewer`` companion (docs/companions.md); its
                                  reply comes back later and starts an editor turn
    delete [document <id>]        ``deleteDocument``: two humans must approve it, neither of
                                  them the one who asked (an approval policy, approvals.md)

For fault tests, ``HELIX_DEMO_MODEL_DELAY_MS`` makes each scripted model call take that many
milliseconds (default 0), so a test can stop or kill the server while a model call runs.
"""

from __future__ import annotations

import os
import re

from pydantic import BaseModel, Field

from .core.agents import Agent, define_agent
from .core.approval_policy import ApprovalPolicy
from .core.companions import as_companion
from .core.llm import LLM, LLMRequest, LLMResponse
from .core.markers import is_sub_agent_notification
from .core.messages import Message
from .core.tools import Tool, define_tool
from .llm.scripted import ScriptedLLM, call, reply

__all__ = [
    "EDITOR_AGENT",
    "REVIEWER_AGENT",
    "MODEL_DELAY_ENV",
    "SERVED_STREAM_PAUSE_SECONDS",
    "UNDERSTOOD",
    "Edit",
    "EditContentInput",
    "EditContentOutput",
    "DeleteDocumentInput",
    "DeleteDocumentOutput",
    "PublishDocumentInput",
    "PublishDocumentOutput",
    "demo_agents",
    "editor_agent",
    "reviewer_agent",
    "reviewer_script",
]

EDITOR_AGENT = "editor"
#: The editor's companion: a persistent agent it consults without waiting.
REVIEWER_AGENT = "reviewer"
#: Test-only: milliseconds each demo model call takes (a stand-in for a real model's latency).
MODEL_DELAY_ENV = "HELIX_DEMO_MODEL_DELAY_MS"
#: The pause between two streamed words of the served demo's replies (``helix-dbos serve``):
#: longer than the runtime's 50 ms delta coalescing, so a browser sees the text grow.
SERVED_STREAM_PAUSE_SECONDS = 0.06
#: The reply to a message the editor does not understand (the document is left alone).
UNDERSTOOD = (
    "I did not understand that, so the document is unchanged. I understand:\n"
    '- replace "old" with "new" (one edit per phrase)\n'
    "- publish, or publish document my-doc (after your approval)\n"
    "- review <anything>: I ask the reviewer, whose reply comes back later\n"
    'For example: replace "quikc" with "quick" and publish'
)

_REPLACE = re.compile(
    r"""replace\s+(["'])(?P<old>.+?)\1\s+with\s+(["'])(?P<new>.*?)\3""", re.IGNORECASE
)
_PUBLISH = re.compile(r"\bpublish", re.IGNORECASE)
_REVIEW = re.compile(r"^\s*review\b", re.IGNORECASE)
_DELETE = re.compile(r"^\s*delete\b", re.IGNORECASE)
_DOCUMENT = re.compile(r"\bdocument\s+(?P<id>[\w.-]+)", re.IGNORECASE)


class Edit(BaseModel):
    """One edit: replace what ``selector`` matches with ``replacement``."""

    selector: str
    replacement: str


class EditContentInput(BaseModel):
    """The edits the client applies to its live document."""

    edits: list[Edit] = Field(min_length=1)


class EditContentOutput(BaseModel):
    """What the client reports back."""

    applied: int = Field(ge=0)
    failed: int = Field(ge=0)
    newVersionId: str | None = None


class PublishDocumentInput(BaseModel):
    """The document to publish."""

    documentId: str = Field(min_length=1)


class PublishDocumentOutput(BaseModel):
    """Where the document was published."""

    published: bool
    url: str


def _publish(args: PublishDocumentInput) -> PublishDocumentOutput:
    return PublishDocumentOutput(published=True, url=f"https://docs.example.com/{args.documentId}")


class DeleteDocumentInput(BaseModel):
    """The document to delete."""

    documentId: str = Field(min_length=1)


class DeleteDocumentOutput(BaseModel):
    """What was deleted."""

    deleted: bool
    documentId: str


def _delete(args: DeleteDocumentInput) -> DeleteDocumentOutput:
    return DeleteDocumentOutput(deleted=True, documentId=args.documentId)


EDIT_CONTENT: Tool = define_tool(
    "editContent",
    "Apply edits to the document open in the user's editor (runs in the browser).",
    EditContentInput,
    EditContentOutput,
    execute="client",
)
PUBLISH_DOCUMENT: Tool = define_tool(
    "publishDocument",
    "Publish the document. A human must approve it first.",
    PublishDocumentInput,
    PublishDocumentOutput,
    execute=_publish,
    require_approval=True,
)


#: The demo's tool that needs two approvers: a quorum of two, neither the session's own user.
DELETE_DOCUMENT: Tool = define_tool(
    "deleteDocument",
    "Delete the document for good. Two humans must approve it first, not the one who asked.",
    DeleteDocumentInput,
    DeleteDocumentOutput,
    execute=_delete,
    require_approval=True,
    approval_policy=ApprovalPolicy(four_eyes=True, quorum=2),
)


def edits_for(message: str) -> list[dict[str, str]]:
    """The edits a message asks for: one per ``replace "a" with "b"`` (none without one)."""
    return [
        {"selector": m.group("old"), "replacement": m.group("new")}
        for m in _REPLACE.finditer(message)
    ]


def _asks_to_publish(message: str) -> bool:
    # Outside the replace phrases: replace "publish" with "release" edits, it does not publish.
    return _PUBLISH.search(_REPLACE.sub(" ", message)) is not None


def _publish_call(request: LLMRequest, user_text: str, text: str = "") -> LLMResponse:
    match = _DOCUMENT.search(_REPLACE.sub(" ", user_text))
    document_id = match.group("id") if match else "doc-1"
    return call(request, ("publishDocument", {"documentId": document_id}), text=text)


def _last_user_text(messages: list[Message]) -> str:
    for message in reversed(messages):
        if message.role == "user" and not is_sub_agent_notification(message):
            return message.content
    return ""


def _latest_tool(messages: list[Message], name: str) -> Message | None:
    # Only this turn's results count: stop at the user message that opened it.
    for message in reversed(messages):
        if message.role == "user":
            return None
        if message.role == "tool" and message.tool_name == name:
            return message
    return None


def _plural(n: int) -> str:
    return "edit" if n == 1 else "edits"


def _edit_outcome(result: Message) -> tuple[str, bool]:
    """The sentence about the edits, and whether they were applied at all."""
    if result.is_error:
        return f"The edits were not applied: {result.content}", False
    data = result.result if isinstance(result.result, dict) else {}
    applied = int(data.get("applied", 0))
    failed = int(data.get("failed", 0))
    text = f"Applied {applied} {_plural(applied)}."
    if failed:
        text += f" {failed} {_plural(failed)} failed."
    return text, True


def _first_step(request: LLMRequest, user_text: str) -> LLMResponse:
    """The answer to the user's message: edits, else a publication, else a review, else what
    it understands."""
    if _DELETE.match(user_text):
        match = _DOCUMENT.search(user_text)
        document_id = match.group("id") if match else "doc-1"
        return call(request, ("deleteDocument", {"documentId": document_id}))
    if _REVIEW.match(user_text):
        send = {"companion": REVIEWER_AGENT, "message": user_text}
        return call(request, ("companion__sendMessage", send), text="Asking the reviewer.")
    edits = edits_for(user_text)
    if edits:
        return call(request, ("editContent", {"edits": edits}))
    if _asks_to_publish(user_text):
        return _publish_call(request, user_text, text="Publishing the document as it is.")
    return reply(UNDERSTOOD)


def _published(publish: Message, before: str) -> LLMResponse:
    lead = f"{before} " if before else ""
    if publish.is_error:
        return reply(f"{lead}The document was not published: {publish.content}")
    url = publish.result.get("url", "") if isinstance(publish.result, dict) else ""
    return reply(f"{lead}Published the document at {url}.")


def editor_script(request: LLMRequest) -> LLMResponse:
    """The editor's deterministic "model": a function of the conversation."""
    messages = request.messages
    last = messages[-1] if messages else None
    if last is not None and is_sub_agent_notification(last):
        return reply(f"The reviewer says: {last.content.split('] ', 1)[-1]}")
    user_text = _last_user_text(messages)
    if last is None or last.role == "user":
        return _first_step(request, user_text)
    sent = _latest_tool(messages, "companion__sendMessage")
    if sent is not None:
        return reply(_sent(sent))
    deleted = _latest_tool(messages, "deleteDocument")
    if deleted is not None:
        if deleted.is_error:
            return reply(f"The document was not deleted: {deleted.content}")
        gone = deleted.result.get("documentId", "") if isinstance(deleted.result, dict) else ""
        return reply(f"Deleted document {gone}.")
    edit = _latest_tool(messages, "editContent")
    publish = _latest_tool(messages, "publishDocument")
    if edit is None:
        if publish is None:
            return reply("I could not apply the edits.")
        return _published(publish, "")  # "publish" alone: nothing was edited
    edit_text, applied = _edit_outcome(edit)
    if not _asks_to_publish(user_text):
        return reply(edit_text)
    if publish is None:
        if not applied:
            return reply(f"{edit_text} Nothing was published.")
        return _publish_call(request, user_text, text=edit_text)
    return _published(publish, edit_text)


def _sent(result: Message) -> str:
    outcome = result.result if isinstance(result.result, dict) else {}
    if outcome.get("delivered"):
        return "The reviewer has it; its reply will appear here."
    return f"The reviewer could not take it ({outcome.get('reason', result.content)})."


def reviewer_script(request: LLMRequest) -> LLMResponse:
    """The reviewer's deterministic "model": a short review of the message it got."""
    text = _last_user_text(request.messages)
    words = len(re.sub(r"^\s*review\b", "", text, flags=re.IGNORECASE).split())
    remark = "Looks good to me." if words < 12 else "Consider saying it in fewer words."
    return reply(f"I read your note ({words} words). {remark}")


def reviewer_agent(*, llm: LLM | None = None) -> Agent:
    """The ``reviewer`` demo companion: persistent, on ``llm``, else a scripted model."""
    return define_agent(
        REVIEWER_AGENT,
        llm=llm or ScriptedLLM(reviewer_script, name="scripted-reviewer"),
        instructions="You review what the editor sends you, briefly.",
        persistent=True,
    )


def _model_delay_seconds() -> float:
    raw = os.environ.get(MODEL_DELAY_ENV, "").strip()
    try:
        return max(0.0, float(raw) / 1000) if raw else 0.0
    except ValueError:
        return 0.0


def editor_agent(
    *,
    client_tool_timeout: float | None = None,
    llm: LLM | None = None,
    stream_pause_seconds: float = 0.0,
) -> Agent:
    """The ``editor`` demo agent: on ``llm``, else a fresh scripted model.

    ``stream_pause_seconds``: the scripted model's pause between two streamed words (see
    ``ScriptedLLM``); 0 sends each reply as one delta. The served demo uses
    ``SERVED_STREAM_PAUSE_SECONDS``.
    """
    return define_agent(
        EDITOR_AGENT,
        llm=llm
        or ScriptedLLM(
            editor_script,
            name="scripted-editor",
            delay_seconds=_model_delay_seconds(),
            stream_pause_seconds=stream_pause_seconds,
        ),
        instructions="You edit the user's document with editContent, publish it with "
        "publishDocument and delete it with deleteDocument when asked; you consult the reviewer with companion__sendMessage.",
        tools=[EDIT_CONTENT, PUBLISH_DOCUMENT, DELETE_DOCUMENT],
        client_tool_timeout=client_tool_timeout,
        # The reviewer's reply starts an editor turn, so it shows in the chat.
        companions=[as_companion(reviewer_agent(llm=llm), wake_parent=True)],
    )


def demo_agents(
    *,
    client_tool_timeout: float | None = None,
    llm: LLM | None = None,
    stream_pause_seconds: float = 0.0,
) -> list[Agent]:
    """Every demo agent, for ``AgentRuntime(demo_agents())`` and the standalone server.

    ``llm`` replaces the scripted model (the server passes the one ``HELIX_LLM`` names).
    ``stream_pause_seconds``: see ``editor_agent`` (the server streams its replies word by
    word; tests keep the default, one delta, fast).
    """
    return [
        editor_agent(
            client_tool_timeout=client_tool_timeout,
            llm=llm,
            stream_pause_seconds=stream_pause_seconds,
        )
    ]
