"""The error tree: stable codes, typed bodies, and a pickle round trip for every class."""

from __future__ import annotations

import ast
import inspect
import json
import pickle
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest

import helix_dbos.errors as errors_module
import helix_dbos.llm  # noqa: F401  (adapters may define more HelixError subclasses)
from helix_dbos.errors import (
    CLIENT_TOOL_ERROR_CODES,
    KNOWN_ERROR_CODES,
    STORE_UNAVAILABLE_MESSAGE,
    AgentNotResumableError,
    ApprovalForbiddenError,
    AuthError,
    ConfigError,
    ErrorCode,
    HelixError,
    InvalidResultError,
    PayloadTooLargeError,
    ProviderError,
    RequestValidationError,
    StaleStateError,
    StoreUnavailableError,
    ToolDefinitionError,
    is_client_tool_error_code,
    is_known_error_code,
)


def all_error_classes() -> list[type[HelixError]]:
    """HelixError and every subclass defined so far, depth first."""
    found: list[type[HelixError]] = []
    todo: list[type[HelixError]] = [HelixError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return sorted(set(found), key=lambda c: (c.__module__, c.__qualname__))


#: Classes whose constructor is not ``(message, **details)``.
FACTORIES: dict[type[HelixError], Callable[[], HelixError]] = {
    InvalidResultError: lambda: InvalidResultError("lookup", "call_1", [{"loc": ["x"]}]),
    PayloadTooLargeError: lambda: PayloadTooLargeError("tool_result", 1000, 2048),
    AuthError: lambda: AuthError("no access to this session", status=403),
    ApprovalForbiddenError: lambda: ApprovalForbiddenError(
        "not this decider", ErrorCode.APPROVAL_NOT_ELIGIBLE, toolCallId="call_1", roles=["cfo"]
    ),
    ProviderError: lambda: ProviderError(
        "upstream overloaded", code="provider_overloaded", retryable=True, status=529
    ),
    StoreUnavailableError: lambda: StoreUnavailableError(retry_after=5),
}


def build(cls: type[HelixError]) -> HelixError:
    """An instance of ``cls`` with a message and some details."""
    if cls in FACTORIES:
        return FACTORIES[cls]()
    for klass in cls.__mro__:
        if "__init__" in vars(klass):
            assert klass is HelixError, f"add a factory for {cls.__qualname__} to FACTORIES"
            break
    return cls("something went wrong", sessionId="s-1", attempts=3)


ERROR_CLASSES = all_error_classes()


def test_the_tree_is_complete() -> None:
    """Every error class the module exports is found, and each is a HelixError."""
    exported = {
        obj
        for name in errors_module.__all__
        if inspect.isclass(obj := getattr(errors_module, name)) and issubclass(obj, Exception)
    }
    assert exported <= set(ERROR_CLASSES)
    assert len(ERROR_CLASSES) >= 19


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__qualname__)
def test_pickle_round_trip(cls: type[HelixError]) -> None:
    """An error survives pickling (DBOS pickles errors that leave a step) with its fields."""
    err = build(cls)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is cls
    assert str(back) == str(err)
    assert back.message == err.message
    assert back.code == err.code
    assert back.details == err.details
    assert back.retryable == err.retryable
    assert back.http_status == err.http_status
    assert back.to_body() == err.to_body()


def test_invalid_result_issues_survive_pickling() -> None:
    """The validation issues of an InvalidResultError survive pickling too."""
    err = InvalidResultError("lookup", "call_1", [{"loc": ["x"]}])
    assert pickle.loads(pickle.dumps(err)).issues == [{"loc": ["x"]}]


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__qualname__)
def test_body_shape(cls: type[HelixError]) -> None:
    """to_body is {error, code, retryable, ...details} with a known code and an HTTP status."""
    err = build(cls)
    body = err.to_body()
    assert list(body)[:3] == ["error", "code", "retryable"]
    assert body["error"] == err.message
    assert body["code"] == err.code
    assert body["retryable"] is err.retryable
    assert {k: v for k, v in body.items() if k not in ("error", "code", "retryable")} == err.details
    assert is_known_error_code(err.code), err.code
    assert 400 <= err.http_status <= 599


def test_specific_fields() -> None:
    """The classes with their own constructors put their fields in the body."""
    too_large = PayloadTooLargeError("tool_result", 1000, 2048).to_body()
    assert too_large["code"] == "validation_payload_too_large"
    assert (too_large["cause"], too_large["limitBytes"], too_large["sizeBytes"]) == (
        "tool_result",
        1000,
        2048,
    )
    assert "sizeBytes" not in PayloadTooLargeError("request_body", 10, None).to_body()
    invalid = InvalidResultError("lookup", "call_1").to_body()
    assert (invalid["code"], invalid["toolName"], invalid["toolCallId"]) == (
        "INVALID_RESULT",
        "lookup",
        "call_1",
    )
    forbidden = AuthError("nope", status=403)
    assert (forbidden.code, forbidden.http_status) == ("forbidden", 403)
    assert AuthError("who?").code == "unauthorized"
    provider = ProviderError("slow", code="provider_timeout", retryable=True, status=504)
    assert provider.to_body() == {
        "error": "slow",
        "code": "provider_timeout",
        "retryable": True,
        "providerStatus": 504,
    }
    unavailable = StoreUnavailableError()
    assert unavailable.to_body() == {
        "error": STORE_UNAVAILABLE_MESSAGE,
        "code": "store_unavailable",
        "retryable": True,
        "retryAfterSeconds": 2,
    }
    assert (unavailable.http_status, StoreUnavailableError(retry_after=7).retry_after) == (503, 7)
    stale = StaleStateError("gave up", sessionIds=["a"], attempts=3)
    assert (stale.code, stale.http_status, stale.retryable) == ("state_conflict", 409, True)


def test_known_codes() -> None:
    """is_known_error_code accepts the framework's codes only, and only strings."""
    assert is_known_error_code("state_conflict")
    assert is_known_error_code("client_tool_timeout")
    assert is_known_error_code("schema_not_current")
    for code in ("nope", "STATE_CONFLICT", "", None, 409, ["state_conflict"]):
        assert not is_known_error_code(code)


def test_client_tool_codes() -> None:
    """is_client_tool_error_code accepts framework-made client-tool failures only."""
    assert CLIENT_TOOL_ERROR_CODES <= KNOWN_ERROR_CODES
    for code in ("client_tool_timeout", "aborted", "runtime_restarted", "approval_denied"):
        assert is_client_tool_error_code(code)
    for other in ("state_conflict", "confirm_cancelled", None, 1):
        assert not is_client_tool_error_code(other)


def test_unpickled_error_can_be_raised_and_caught() -> None:
    """A round-tripped error is still caught by its class and by HelixError."""
    err: Any = pickle.loads(pickle.dumps(StaleStateError("x", attempts=3)))
    with pytest.raises(StaleStateError):
        raise err
    with pytest.raises(HelixError):
        raise err


def test_error_codes_are_one_string_enum() -> None:
    """Codes are ErrorCode members: strings on the wire, and the known set is the enum."""
    assert issubclass(ErrorCode, StrEnum)
    assert set(ErrorCode) == set(KNOWN_ERROR_CODES)
    code: str = ErrorCode.STATE_NOT_FOUND
    assert code == "state_not_found"
    assert json.dumps({"code": ErrorCode.STATE_CONFLICT}) == '{"code": "state_conflict"}'
    assert len({code.value for code in ErrorCode}) == len(ErrorCode)


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__qualname__)
def test_every_class_code_is_an_error_code(cls: type[HelixError]) -> None:
    """No class carries a code outside the enum (a typo would be a new, unknown code)."""
    assert build(cls).code in set(ErrorCode)


def test_server_configuration_is_not_client_validation() -> None:
    """A misconfigured server (500) and an invalid request (400) have different codes."""
    assert (ConfigError.code, ConfigError.http_status) == ("config_error", 500)
    assert (ToolDefinitionError.code, ToolDefinitionError.http_status) == ("config_error", 500)
    assert (RequestValidationError.code, RequestValidationError.http_status) == (
        "validation_error",
        400,
    )


def test_retryable_is_given_at_construction() -> None:
    """A retryable instance of a non-retryable class is built so, and survives pickling."""
    partial = AgentNotResumableError("partial batch", sessionId="s", retryable=True)
    assert partial.retryable and not AgentNotResumableError.retryable
    assert partial.to_body() == {
        "error": "partial batch",
        "code": "state_not_resumable",
        "retryable": True,
        "sessionId": "s",
    }
    assert pickle.loads(pickle.dumps(partial)).retryable is True
    assert not StaleStateError("x", retryable=False).retryable


def _mutations(source: str) -> list[str]:
    """``<expr>.code = ...``, ``.retryable``, ``.http_status``, ``.message`` or
    ``<expr>.details[...] = ...`` outside a constructor's ``self``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Subscript):
                    target = target.value  # ``exc.details[key] = ...`` changes ``exc.details``
                    attrs: tuple[str, ...] = ("details",)
                else:
                    attrs = ("code", "retryable", "http_status", "message")
                if (
                    isinstance(target, ast.Attribute)
                    and target.attr in attrs
                    and not (isinstance(target.value, ast.Name) and target.value.id == "self")
                ):
                    found.append(f"line {node.lineno}: {ast.unparse(target)}")
    return found


def test_no_error_instance_is_mutated_after_construction() -> None:
    """Errors get their code and retryable from their constructor, never by assignment."""
    package = Path(errors_module.__file__).parent
    offenders = {
        str(path.relative_to(package)): found
        for path in sorted(package.rglob("*.py"))
        if path.name != "errors.py" and (found := _mutations(path.read_text()))
    }
    assert offenders == {}
    assert _mutations("exc = E('x')\nexc.retryable = True\n") == ["line 2: exc.retryable"]
    assert _mutations("exc.details['k'] = 1\nexc.message = 'm'\n") == [
        "line 1: exc.details",
        "line 2: exc.message",
    ]
