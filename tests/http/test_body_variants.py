"""The request bodies with variants in the OpenAPI document (``http/body_variants.py``): one
arm per variant, and every body an arm describes is a body the server's model accepts."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from helix_dbos.http.body_variants import Arm, chat_request_variants, one_arm_per_variant
from helix_dbos.http.schemas import (
    ChatSubmitToolResultRequest,
    ResumeRequest,
    SubmitToolResultRequest,
)
from tests.support.strategies import json_objects, json_values


def model_schema() -> dict[str, Any]:
    """An object schema as pydantic writes it (wire names, titles, ``X | null``)."""
    return {
        "title": "Thing",
        "description": "A thing.",
        "type": "object",
        "properties": {
            "kind": {"title": "Kind", "type": "string", "default": "a"},
            "id": {"title": "Id", "type": "string", "maxLength": 9},
            "note": {
                "title": "Note",
                "anyOf": [{"type": "string"}, {"type": "null"}],
                "default": None,
            },
            "size": {"anyOf": [{"type": "integer"}, {"type": "string"}, {"type": "null"}]},
            "extra": {"type": "boolean"},
        },
        "required": ["id"],
        "$defs": {"Other": {"type": "object"}},
    }


def test_each_arm_is_a_closed_object_with_its_tag() -> None:
    """The tag is a ``const``; required fields are required (the tag too unless it is the
    default); fields of no arm are gone; pydantic's titles and defaults are dropped; the
    model's title and description stay."""
    schema = model_schema()
    one_arm_per_variant(
        schema,
        [
            Arm("A", "The a.", tag="kind", value="a", required=("id",), tag_is_default=True),
            Arm("B", "The b.", tag="kind", value="b", required=("id", "note"), optional=("size",)),
        ],
    )
    assert set(schema) == {"title", "description", "type", "oneOf"}
    assert (schema["title"], schema["description"], schema["type"]) == (
        "Thing",
        "A thing.",
        "object",
    )
    first, second = schema["oneOf"]
    assert first == {
        "title": "A",
        "description": "The a.",
        "type": "object",
        "properties": {
            "kind": {"type": "string", "const": "a", "default": "a"},
            "id": {"type": "string", "maxLength": 9},
        },
        "required": ["id"],
        "additionalProperties": False,
    }
    assert second["required"] == ["kind", "id", "note"]
    assert second["properties"]["kind"] == {"type": "string", "const": "b"}
    assert second["properties"]["note"] == {"type": "string"}
    assert second["properties"]["size"] == {
        "anyOf": [{"type": "integer"}, {"type": "string"}, {"type": "null"}]
    }


def test_null_is_taken_out_of_required_and_not_null_fields() -> None:
    """A required field (or one listed in ``not_null``) takes no ``null``; with several other
    types left it stays an ``anyOf`` of them."""
    schema = model_schema()
    one_arm_per_variant(
        schema,
        [
            Arm(
                "A",
                "a",
                tag="kind",
                value="a",
                required=("size",),
                optional=("note",),
                not_null=("note",),
            )
        ],
    )
    props = schema["oneOf"][0]["properties"]
    assert props["size"] == {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert props["note"] == {"type": "string"}


def test_an_arm_keeps_its_extra_keywords() -> None:
    """An arm's own ``oneOf`` (exactly one of two fields) is part of it."""
    schema = model_schema()
    extra = {"oneOf": [{"required": ["id"]}, {"required": ["note"]}]}
    one_arm_per_variant(
        schema,
        [Arm("A", "a", tag="kind", value="a", required=(), optional=("id", "note"), extra=extra)],
    )
    assert schema["oneOf"][0]["oneOf"] == extra["oneOf"]


def test_the_chat_body_describes_messages_and_refuses_regenerate() -> None:
    """Messages are a non-empty list of user or assistant messages; ``trigger`` is any text
    but ``regenerate-message``, or null; no ``$defs`` are left to dangle."""
    schema: dict[str, Any] = {"properties": {"messages": {}, "trigger": {}, "id": {}}, "$defs": {}}
    chat_request_variants(schema)
    messages = schema["properties"]["messages"]
    assert (messages["type"], messages["minItems"]) == ("array", 1)
    roles = [arm["properties"]["role"]["const"] for arm in messages["items"]["oneOf"]]
    assert roles == ["user", "assistant"]
    assert {"type": "string", "not": {"const": "regenerate-message"}} in schema["properties"][
        "trigger"
    ]["anyOf"]
    assert "$defs" not in schema and "id" in schema["properties"]


# -- the document's arms against the server's models --------------------------------------------

TEXT = st.characters(blacklist_categories=("Cc", "Cs"))


def values(prop: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values the property's schema allows (for the keywords the arms use)."""
    if "const" in prop:
        return st.just(prop["const"])
    if "anyOf" in prop:
        return st.one_of([values(arm) for arm in prop["anyOf"]])
    kind = prop.get("type")
    if kind == "string":
        size = min(prop.get("maxLength", 12), 12)
        text = st.text(TEXT, min_size=prop.get("minLength", 0), max_size=size)
        pattern = prop.get("pattern")
        # A pattern as JSON Schema reads it: unanchored, a match anywhere.
        return text if pattern is None else text.filter(lambda t: re.search(pattern, t) is not None)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "object":
        return json_objects
    assert kind is None, prop
    return json_values


@st.composite
def bodies(draw: st.DrawFn, arm: dict[str, Any]) -> dict[str, Any]:
    """A body the arm accepts: its required fields, some optional ones, and exactly one
    alternative of its own ``oneOf`` (each alternative only requires fields)."""
    required = set(arm["required"])
    excluded: set[str] = set()
    if "oneOf" in arm:
        choice = draw(st.sampled_from(arm["oneOf"]))
        required |= set(choice["required"])
        excluded = {f for alt in arm["oneOf"] if alt is not choice for f in alt["required"]}
    body: dict[str, Any] = {}
    for name, prop in arm["properties"].items():
        if name in excluded:
            continue
        if name in required or draw(st.booleans()):
            body[name] = draw(values(prop))
    return body


def arms_of(model: type[BaseModel]) -> list[dict[str, Any]]:
    arms: list[dict[str, Any]] = model.model_json_schema(by_alias=True)["oneOf"]
    return arms


ARMS = [
    (model, arm)
    for model in (SubmitToolResultRequest, ChatSubmitToolResultRequest, ResumeRequest)
    for arm in arms_of(model)
]


@pytest.mark.parametrize(
    ("model", "arm"), ARMS, ids=[f"{m.__name__}:{a['title']}" for m, a in ARMS]
)
@given(data=st.data())
def test_a_body_an_arm_describes_is_one_the_model_accepts(
    model: type[BaseModel], arm: dict[str, Any], data: st.DataObject
) -> None:
    """The rule of every arm: what the document accepts, the server accepts (a client
    generated from the document never sends a body the server refuses)."""
    body = data.draw(bodies(arm))
    model.model_validate(body)


def test_every_variant_has_its_arm() -> None:
    """One arm per ``kind`` and per ``mode``."""
    assert [a["properties"]["kind"]["const"] for a in arms_of(SubmitToolResultRequest)] == [
        "client-tool-result",
        "approval-response",
    ]
    assert "sessionId" not in arms_of(ChatSubmitToolResultRequest)[0]["properties"]
    assert [a["properties"]["mode"]["const"] for a in arms_of(ResumeRequest)] == [
        "continue",
        "with_message",
        "from_checkpoint",
    ]
