"""The model protocol's data: usage that adds up, a request's and a response's defaults."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from helix_dbos.core.llm import LLM, LLMRequest, LLMResponse, Usage
from helix_dbos.core.messages import Message, ToolCall
from helix_dbos.llm.scripted import ScriptedLLM, reply

counts = st.integers(min_value=0, max_value=10**12)
usages = st.builds(Usage, input_tokens=counts, output_tokens=counts, cached_tokens=counts)


@given(usages, usages, usages)
def test_usage_adds_field_by_field(a: Usage, b: Usage, c: Usage) -> None:
    """Sums are per field, in any order and grouping, and zero changes nothing."""
    total = a + b
    assert total.input_tokens == a.input_tokens + b.input_tokens
    assert total.output_tokens == a.output_tokens + b.output_tokens
    assert total.cached_tokens == a.cached_tokens + b.cached_tokens
    assert a + b == b + a
    assert (a + b) + c == a + (b + c)
    assert a + Usage() == a


def test_usage_addition_leaves_its_operands_alone() -> None:
    """``+`` builds a new value (a turn's running total never changes a step's own usage)."""
    a, b = Usage(input_tokens=1), Usage(output_tokens=2)
    assert a + b is not a
    assert (a, b) == (Usage(input_tokens=1), Usage(output_tokens=2))


def test_a_response_defaults_to_an_empty_final_answer() -> None:
    """No text, no calls, no usage, ``end_turn``; lists are not shared between responses."""
    first, second = LLMResponse(), LLMResponse()
    assert (first.text, first.tool_calls, first.usage, first.stop_reason) == (
        "",
        [],
        Usage(),
        "end_turn",
    )
    first.tool_calls.append(ToolCall(id="c1", name="t"))
    assert second.tool_calls == []


def test_a_request_needs_only_instructions_and_messages() -> None:
    """Tools, session, run and step have defaults; the JSON form round-trips."""
    request = LLMRequest(instructions="Be brief.", messages=[Message(role="user", content="hi")])
    assert (request.tools, request.session_id, request.run_id, request.step) == ([], "", "", 0)
    assert LLMRequest.model_validate(request.model_dump(mode="json")) == request


def test_an_adapter_is_recognised_by_its_shape() -> None:
    """``LLM`` is a runtime-checkable protocol: a name and ``complete``, no base class."""
    assert isinstance(ScriptedLLM(lambda request: reply("ok")), LLM)
    assert not isinstance(object(), LLM)
