"""One spelling per field: every model a route accepts refuses a second name for any of its
fields (the Python name of a camelCase field, at any depth) and any name it does not document.

The models are found, not listed: a route's body model must declare the session it acts on
(``session_field``, or ``RouteContext.body`` refuses it), so every such class in
``helix_dbos.http`` is a model a route accepts, and each must have an example here.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

import helix_dbos.http as http_package
from helix_dbos.errors import RequestValidationError
from helix_dbos.http.body import validate_body
from helix_dbos.http.pipeline import named_sessions, session_field

#: The modules of an optional extra, and the package that extra installs.
OPTIONAL = {"helix_dbos.http.mcp_route": "mcp", "helix_dbos.http.mcp_tasks": "mcp"}

#: Objects whose keys are the client's own data, not a model's fields.
FREE_FORM = {"state", "forwardedProps", "editedInput", "input", "parameters", "metadata", "payload"}

_APPROVAL = {
    "kind": "approval-response",
    "sessionId": "ses_1",
    "toolCallId": "call_1",
    "approvalId": "run_1::call_1",
    "approved": True,
    "reason": "ok",
    "editedInput": {"a": 1},
    "input": {"a": 1},
}

#: A valid body of each model, using every field that has a second spelling.
EXAMPLES: dict[str, dict[str, Any]] = {
    "StartRequest": {"agentType": "editor", "message": "hi", "sessionId": "ses_1"},
    "ResumeRequest": {
        "sessionId": "ses_1",
        "mode": "with_message",
        "message": "hi",
        "abandonPending": True,
    },
    "RetryRequest": {"sessionId": "ses_1", "message": "again", "checkpointId": "ckpt_1"},
    "ControlRequest": {"sessionId": "ses_1", "reason": "stop"},
    "SubmitToolResultRequest": _APPROVAL,
    "ChatSubmitToolResultRequest": _APPROVAL,
    "ChatRequest": {
        "id": "ses_1",
        "messages": [
            {"id": "m1", "role": "user", "metadata": {}, "parts": [{"type": "text", "text": "hi"}]}
        ],
        "trigger": "submit-message",
        "messageId": "m1",
    },
    "AguiRunInput": {
        "threadId": "ses_1",
        "runId": "run_1",
        "parentRunId": "run_0",
        "state": {},
        "messages": [
            {"id": "u1", "role": "user", "content": "hi"},
            {
                "id": "a1",
                "role": "assistant",
                "content": "calling",
                "toolCalls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "editContent", "arguments": "{}"},
                    }
                ],
            },
            {"id": "t1", "role": "tool", "content": "{}", "toolCallId": "call_1"},
        ],
        "tools": [{"name": "editContent", "description": "Edit", "parameters": {}}],
        "context": [{"description": "d", "value": "v"}],
        "forwardedProps": {},
        "resume": [{"interruptId": "run_1::call_2", "status": "resolved", "payload": {}}],
    },
}


def route_models() -> dict[str, type[BaseModel]]:
    """Every class in ``helix_dbos.http`` that declares the session it acts on."""
    found: dict[str, type[BaseModel]] = {}
    for info in pkgutil.walk_packages(http_package.__path__, f"{http_package.__name__}."):
        extra = OPTIONAL.get(info.name)
        if extra is not None and importlib.util.find_spec(extra) is None:
            continue  # a module of an extra that is not installed: it serves no route here
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseModel)
                and "session_field" in dir(value)
                and value.__module__ == module.__name__
            ):
                found[name] = value
    return found


MODELS = route_models()


def _refused(model: type[BaseModel], body: dict[str, Any]) -> bool:
    try:
        validate_body(model, body, message="invalid", verbose=False)
    except RequestValidationError:
        return True
    return False


def _objects(
    node: Any, path: tuple[Any, ...] = ()
) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Every object of a body that is a model's (free-form data skipped), with its path."""
    if isinstance(node, dict):
        if path and path[-1] in FREE_FORM:
            return
        if "parts" in path:
            return  # the AI SDK's parts are read loosely, as data
        yield path, node
        for key, value in node.items():
            yield from _objects(value, (*path, key))
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _objects(item, (*path, index))


def _replace(body: Any, path: tuple[Any, ...], new: dict[str, Any]) -> Any:
    if not path:
        return new
    head, *rest = path
    if isinstance(body, list):
        return [_replace(v, tuple(rest), new) if i == head else v for i, v in enumerate(body)]
    return {k: _replace(v, tuple(rest), new) if k == head else v for k, v in body.items()}


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


def test_every_route_model_has_an_example() -> None:
    assert set(MODELS) == set(EXAMPLES), "a new route model needs an example here"
    for name, model in MODELS.items():
        assert session_field(model)  # what RouteContext.body reads
        assert not _refused(model, EXAMPLES[name]), name


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_a_second_spelling_of_any_field_is_refused(name: str) -> None:
    model, body = MODELS[name], EXAMPLES[name]
    tried = 0
    for path, obj in _objects(body):
        for key in obj:
            if _snake(key) == key:
                continue
            renamed = {(_snake(k) if k == key else k): v for k, v in obj.items()}
            assert _refused(model, _replace(body, path, renamed)), (name, path, key)
            tried += 1
    assert tried > 0


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_an_undocumented_name_is_refused_at_every_depth(name: str) -> None:
    model, body = MODELS[name], EXAMPLES[name]
    for path, obj in _objects(body):
        assert _refused(model, _replace(body, path, {**obj, "unDocumented": 1})), (name, path)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_an_invalid_body_names_its_session_under_every_spelling(name: str) -> None:
    """What the pipeline authorizes before it refuses an invalid body."""
    model = MODELS[name]
    field = session_field(model)
    alias = model.model_fields[field].alias or field
    for spelling in {field, alias, alias.upper(), alias.lower(), _snake(alias).upper()}:
        assert named_sessions(model, {spelling: "ses_victim", "bogus": 1}) == ["ses_victim"]


#: What ``POST /mcp`` reads itself (JSON-RPC params, not a route body): a valid example of
#: each, by what it is (the SDK parses the protocol's own requests).
MCP_EXAMPLES: dict[str, dict[str, Any]] = {
    "tasks/get": {"taskId": "ses_1/run_1/1", "_meta": {}},
    "tasks/update": {"taskId": "ses_1/run_1/1", "inputResponses": {"call_1": {}}},
    "tools/call arguments": {"message": "hi", "sessionId": "ses_1"},
}


def _mcp_refused(what: str, body: dict[str, Any]) -> bool:
    """Whether ``/mcp`` refuses ``body`` as ``what`` (the parse its handler runs)."""
    from mcp import MCPError
    from pydantic import ValidationError

    from helix_dbos.http.mcp_route import agent_arguments
    from helix_dbos.http.mcp_tasks import TaskParams, TaskUpdateParams

    try:
        if what == "tools/call arguments":
            agent_arguments(body)
        else:
            (TaskParams if what == "tasks/get" else TaskUpdateParams).model_validate(body)
    except (MCPError, ValidationError):
        return True
    return False


@pytest.mark.skipif(importlib.util.find_spec("mcp") is None, reason="the mcp extra")
@pytest.mark.parametrize("what", sorted(MCP_EXAMPLES))
def test_mcp_params_take_one_spelling_and_no_undocumented_name(what: str) -> None:
    """``/mcp``'s own params and an agent tool's arguments: the camelCase name only
    (``task_id``, ``input_responses``, ``session_id`` are refused, not ignored: a
    ``session_id`` ignored would start a new session) and no name they do not document."""
    body = MCP_EXAMPLES[what]
    assert not _mcp_refused(what, body)
    renamed = [k for k in body if _snake(k) != k]
    assert renamed
    for key in renamed:
        second = {(_snake(k) if k == key else k): v for k, v in body.items()}
        assert _mcp_refused(what, second), (what, key)
    assert _mcp_refused(what, {**body, "unDocumented": 1})
