"""How the request bodies with variants appear in the OpenAPI document: one arm per variant.

A submit is a client tool's answer or an approval decision (``kind``), a resume continues,
delivers a message or rewinds (``mode``). Their pydantic models are single classes whose
validators enforce what each variant requires and forbids; JSON Schema generated from them
would allow every field in every variant, so a client generated from the document, or a test
driven by it, would send bodies the server refuses. The models' ``json_schema_extra`` hooks
here replace that schema with a ``oneOf``: one arm per variant, its tag a ``const``, its
required fields required, everything else forbidden (``additionalProperties: false``).

The rule for every arm: a body the document accepts is a body the server accepts (or refuses
for a reason that depends on state: no such session or pending call, a turn running). Where the
server's rule cannot be said in JSON Schema, the arm says a stricter rule the server always
accepts: a field the server also takes as ``null`` is simply absent from an arm that forbids
it, and the chat's messages are described as user messages with text or assistant messages.

The document does not use OpenAPI's ``discriminator``: it needs the tag in every body, and
``kind`` (``client-tool-result``) and ``mode`` (``continue``) may be left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "NO_NUL_PATTERN",
    "Arm",
    "chat_request_variants",
    "chat_submit_variants",
    "one_arm_per_variant",
    "resume_variants",
    "submit_variants",
]

#: Text the store can keep: PostgreSQL refuses a NUL character in text and JSONB, so the server
#: refuses one anywhere in a body (``body.check_json_value``).
NO_NUL_PATTERN = r"^[^\x00]*$"

#: What a free-form JSON value in a body may hold.
_FREE_FORM = "Any JSON value; its strings and keys cannot contain a NUL character."


@dataclass(frozen=True)
class Arm:
    """One variant of a body: the fields it takes (and which are required), its tag's value."""

    title: str
    description: str
    tag: str
    value: str
    required: Sequence[str]
    optional: Sequence[str] = ()
    #: The tag may be left out: the server's default is this variant.
    tag_is_default: bool = False
    #: Fields whose ``null`` the arm does not take (the server's model allows it elsewhere).
    not_null: Sequence[str] = ()
    #: Extra keywords of the arm (``oneOf`` of its own, ...).
    extra: dict[str, Any] = field(default_factory=dict)


def _plain(prop: dict[str, Any]) -> dict[str, Any]:
    """A property without pydantic's generated ``title`` and model ``default``."""
    return {k: v for k, v in prop.items() if k not in ("title", "default")}


def _without_null(prop: dict[str, Any]) -> dict[str, Any]:
    """``X | null`` as ``X`` (the arm requires a value)."""
    arms = prop.get("anyOf")
    if not isinstance(arms, list):
        return prop
    kept = [a for a in arms if a != {"type": "null"}]
    rest = {k: v for k, v in prop.items() if k != "anyOf"}
    return {**kept[0], **rest} if len(kept) == 1 else {**rest, "anyOf": kept}


def one_arm_per_variant(schema: dict[str, Any], arms: Sequence[Arm]) -> None:
    """Replace the object ``schema`` (pydantic's, wire names) with ``oneOf`` ``arms``, in place.

    Each arm keeps pydantic's schema of the fields it takes, so the identifier rule, lengths
    and descriptions stay the models' own.
    """
    properties: dict[str, Any] = schema["properties"]
    one_of = []
    for arm in arms:
        tag: dict[str, Any] = {"type": "string", "const": arm.value}
        if arm.tag_is_default:
            tag["default"] = arm.value
        props: dict[str, Any] = {arm.tag: tag}
        for name in (*arm.required, *arm.optional):
            prop = _plain(properties[name])
            if name in arm.required or name in arm.not_null:
                prop = _without_null(prop)
            props[name] = prop
        required = list(arm.required) if arm.tag_is_default else [arm.tag, *arm.required]
        one_of.append(
            {
                "title": arm.title,
                "description": arm.description,
                "type": "object",
                "properties": props,
                "required": required,
                "additionalProperties": False,
                **arm.extra,
            }
        )
    kept: dict[str, Any] = {k: schema[k] for k in ("title", "description") if k in schema}
    schema.clear()
    schema.update(kept, type="object", oneOf=one_of)


def _submit_arms(session_in_body: bool) -> list[Arm]:
    session = ("sessionId",) if session_in_body else ()
    return [
        Arm(
            title="Client tool result",
            description="A client tool's answer (`kind` may be left out): exactly one of "
            "`result` (any JSON, `null` included; it must match the tool's output schema) or "
            "`error` (the tool failed: the model sees the text).",
            tag="kind",
            value="client-tool-result",
            tag_is_default=True,
            required=(*session, "toolCallId"),
            optional=("result", "error"),
            not_null=("error",),
            extra={"oneOf": [{"required": ["result"]}, {"required": ["error"]}]},
        ),
        Arm(
            title="Approval response",
            description="A human's decision on a call that needs approval: `approvalId` from "
            "the `tool_approval_request` event and `approved`; optionally a `reason`, "
            "`editedInput` (approved arguments that replace the model's) and `input` (the "
            "arguments the human was shown: the approval is refused if they are not the "
            "call's).",
            tag="kind",
            value="approval-response",
            required=(*session, "toolCallId", "approvalId", "approved"),
            optional=("reason", "editedInput", "input"),
        ),
    ]


def _free_form(schema: dict[str, Any], name: str) -> None:
    schema["properties"][name]["description"] = _FREE_FORM


def submit_variants(schema: dict[str, Any]) -> None:
    """``json_schema_extra`` of ``SubmitToolResultRequest``: one arm per ``kind``."""
    _free_form(schema, "result")
    one_arm_per_variant(schema, _submit_arms(session_in_body=True))


def chat_submit_variants(schema: dict[str, Any]) -> None:
    """``json_schema_extra`` of the chat-path submit: the session is the path's id.

    The server also takes a ``sessionId`` equal to the path's id; JSON Schema cannot compare
    a body field with the path, so the document leaves it out (any other value is refused).
    """
    _free_form(schema, "result")
    one_arm_per_variant(schema, _submit_arms(session_in_body=False))


def resume_variants(schema: dict[str, Any]) -> None:
    """``json_schema_extra`` of ``ResumeRequest``: one arm per ``mode``."""
    one_arm_per_variant(
        schema,
        [
            Arm(
                title="Continue",
                description="Adopt the continuation of a complete batch of answers (`mode` "
                "may be left out).",
                tag="mode",
                value="continue",
                tag_is_default=True,
                required=("sessionId",),
            ),
            Arm(
                title="With a message",
                description="Deliver `message` as the next user message; `abandonPending` "
                "answers every unanswered call `client_tool_abandoned` first.",
                tag="mode",
                value="with_message",
                required=("sessionId", "message"),
                optional=("abandonPending",),
            ),
            Arm(
                title="From a checkpoint",
                description="Rewind to `checkpointId` (from `GET /checkpoints`) and continue "
                "from there.",
                tag="mode",
                value="from_checkpoint",
                required=("sessionId", "checkpointId"),
            ),
        ],
    )


# -- the AI SDK chat -------------------------------------------------------------------------

#: A text part with something to say (Python's ``str.strip`` and the pattern's ``\S`` agree on
#: what is blank).
_TEXT_PART = {
    "type": "object",
    "properties": {"type": {"const": "text"}, "text": {"type": "string", "pattern": r"\S"}},
    "required": ["type", "text"],
}

_USER_MESSAGE = {
    "title": "User message",
    "description": "Its text parts are the user's message (at least one has text).",
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "role": {"const": "user"},
        "metadata": {"description": "The application's own data; never read."},
        "parts": {"type": "array", "items": {"type": "object"}, "contains": _TEXT_PART},
    },
    "required": ["role", "parts"],
    "additionalProperties": False,
}

_ASSISTANT_MESSAGE = {
    "title": "Assistant message",
    "description": "As the last message, its tool parts (`type` `tool-<name>` or "
    "`dynamic-tool`, with `toolCallId`) answer the calls the chat waits on: state "
    "`output-available` with `output` for a client tool, `output-error` with `errorText` "
    "(a string), or `approval-responded` with `approval: {id, approved, reason?}` for a call "
    "that needs approval; a part of another shape for a waiting call is refused. Parts for "
    "other calls are history and are ignored.",
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "role": {"const": "assistant"},
        "metadata": {"description": "The application's own data; never read."},
        "parts": {"type": "array", "items": {"type": "object"}},
    },
    "required": ["role"],
    "additionalProperties": False,
}


def chat_request_variants(schema: dict[str, Any]) -> None:
    """``json_schema_extra`` of the AI SDK chat body.

    The server acts on the last message: a user message starts a turn with its text (a user
    message without text is refused), an assistant message answers pending calls, a system
    message is refused. JSON Schema cannot single out the last item of an array, so the
    document describes every message as a user message with text or an assistant message (the
    server ignores a system message before the last). ``regenerate-message`` is refused: it
    would rewrite the server's history.
    """
    props = schema["properties"]
    props["messages"] = {
        "type": "array",
        "minItems": 1,
        "description": "The chat's messages; the server acts on the last one. Parts are "
        "free-form JSON objects, whose strings and keys cannot contain a NUL character.",
        "items": {"oneOf": [_USER_MESSAGE, _ASSISTANT_MESSAGE]},
    }
    props["trigger"] = {
        "anyOf": [
            {"type": "string", "not": {"const": "regenerate-message"}},
            {"type": "null"},
        ],
        "description": "The AI SDK's trigger; `regenerate-message` is refused (send a new "
        "message instead).",
    }
    schema.pop("$defs", None)
