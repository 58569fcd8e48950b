"""The public line: every exported name is pinned, and every module is public or internal.

A name leaving an ``__all__`` breaks its importers; a module added without a place in
docs/public-api.md is a module nobody knows whether they may use. Both fail here.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import helix_dbos

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "public-api.md"

#: Each public package's ``__all__``. Adding a name is fine (add it here); removing or
#: renaming one is a breaking change that goes into CHANGELOG.md.
EXPORTS: dict[str, list[str]] = {
    "helix_dbos": [
        "Agent",
        "AgentRegistry",
        "AgentRuntime",
        "ApprovalPolicy",
        "COMPANION_NOT_DELIVERED_REASONS",
        "Companion",
        "CompanionDeliveryOutcome",
        "Continuation",
        "DEFAULT_CLIENT_TOOL_TIMEOUT",
        "DEFAULT_TOMBSTONE_RETENTION",
        "Decider",
        "DefaultResult",
        "ErrorCode",
        "HelixError",
        "HelixSettings",
        "LLM",
        "LLMRequest",
        "LLMResponse",
        "Message",
        "PendingCall",
        "RESERVED_TOOL_NAME_PREFIXES",
        "SessionState",
        "SubmitAnswer",
        "TextSink",
        "Tombstone",
        "Tool",
        "ToolAsks",
        "ToolCall",
        "ToolFailure",
        "ToolSchema",
        "Toolset",
        "TurnHandle",
        "Usage",
        "__version__",
        "as_companion",
        "call_key",
        "create_app",
        "create_router",
        "define_agent",
        "define_tool",
        "humanize_client_tool_error",
        "is_client_tool_error_code",
        "is_known_error_code",
        "set_client_tool_error_humanizer",
        "subagent_tool",
        "tool_answers",
    ],
    "helix_dbos.core": [
        "COMPANION_NOT_DELIVERED_REASONS",
        "DEFAULT_CLIENT_TOOL_TIMEOUT",
        "DEFAULT_TOMBSTONE_RETENTION",
        "LLM",
        "RESERVED_TOOL_NAME_PREFIXES",
        "Agent",
        "AgentRegistry",
        "ApprovalPolicy",
        "Companion",
        "CompanionDeliveryOutcome",
        "Continuation",
        "Decider",
        "DefaultResult",
        "LLMRequest",
        "LLMResponse",
        "Message",
        "PendingCall",
        "SessionState",
        "SubmitAnswer",
        "Tombstone",
        "Tool",
        "ToolAsks",
        "ToolCall",
        "ToolFailure",
        "ToolSchema",
        "Toolset",
        "Usage",
        "as_companion",
        "call_key",
        "define_agent",
        "define_tool",
        "subagent_tool",
        "tool_answers",
    ],
    "helix_dbos.errors": [
        "CLIENT_TOOL_ERROR_CODES",
        "INVALID_RESULT_MESSAGE",
        "KNOWN_ERROR_CODES",
        "VALIDATION_ERROR_MESSAGE",
        "AgentAlreadyRunningError",
        "AgentNotFoundError",
        "AgentNotResumableError",
        "ApprovalForbiddenError",
        "ApprovalMismatchError",
        "AuthError",
        "ConfigError",
        "ErrorCode",
        "HelixError",
        "InvalidResultError",
        "NotSupportedError",
        "PayloadTooLargeError",
        "ProviderError",
        "RateLimitedError",
        "RequestValidationError",
        "RunSupersededError",
        "STORE_UNAVAILABLE_MESSAGE",
        "SchemaNotCurrentError",
        "SessionNotFoundError",
        "StaleStateError",
        "StateSizeExceededError",
        "StoreUnavailableError",
        "ToolDefinitionError",
        "is_client_tool_error_code",
        "is_known_error_code",
        "with_details",
    ],
    "helix_dbos.config": [
        "DEFAULT_MAX_RESULT_BYTES",
        "DatabaseUrls",
        "HelixSettings",
        "generate_executor_id",
        "parse_database_url",
        "parse_duration",
        "redact_url",
    ],
    "helix_dbos.llm": [
        "AnthropicLLM",
        "OpenAICompatibleLLM",
        "ScriptedLLM",
        "call",
        "infer_llm",
        "reply",
    ],
    "helix_dbos.http": [
        "DEFAULT_SUBMIT_RATE_LIMIT",
        "AuthHook",
        "AuthResult",
        "SessionTokens",
        "SlidingWindowLimiter",
        "TokenIssuer",
        "create_app",
        "create_chat_router",
        "create_metrics_router",
        "create_router",
        "error_response",
        "install_error_handlers",
        "lifespan_for",
        "metrics_app",
        "metrics_token_auth",
        "request_body",
        "request_decider",
        "request_is_approver",
        "request_principal",
        "request_session_id",
        "request_tenant",
        "session_token_auth",
    ],
    "helix_dbos.runtime": [
        "MISSING",
        "AgentRuntime",
        "DeliveryOptions",
        "ExecutorInfo",
        "Notification",
        "Operator",
        "Submission",
        "TurnHandle",
        "WorkflowInfo",
        "companion_views",
        "continuation_id",
        "mark_of",
        "waits_on_child",
    ],
    "helix_dbos.testing": ["CapturedEvent", "ScriptedLLM", "call", "capture_log_events", "reply"],
    "helix_dbos.observability.logging_config": [
        "LOG_FORMATS",
        "LOG_LEVEL_ENV",
        "EventFormatter",
        "JsonEventFormatter",
        "QuerySecretFilter",
        "StoppedTurnFilter",
        "configure_logging",
        "install_query_secret_filter",
        "mask_query_secrets",
        "parse_level",
    ],
    "helix_dbos.observability.approval_metrics": [
        "CONTENT_TYPE",
        "WAIT_BUCKETS",
        "WAIT_OUTCOMES",
        "ApprovalMetrics",
        "PendingFigures",
        "activate",
        "active",
        "deactivate",
        "record_answer",
        "record_outcome",
        "record_refusal",
        "record_results",
        "record_submit",
        "record_turn",
        "wait_outcome",
    ],
    "helix_dbos.runtime.live_metrics": ["scrape"],
    "helix_dbos.mcp": [
        "IDEMPOTENCY_META_KEY",
        "MCP_SERVER_UNAVAILABLE",
        "MCP_TOOL_ERROR",
        "MCPTool",
        "MCPToolset",
        "mcp_http",
        "mcp_stdio",
    ],
    # Internal: the store's facade, the one door of the runtime into the store (the import
    # contract store-door); pinned so that a name added there is a decision.
    "helix_dbos.store": [
        "APPROVALS_PAGE_DEFAULT",
        "EVENTS_CHANNEL",
        "OWNERSHIP_ATTEMPTS",
        "PENDING_CLEAR_ATTEMPTS",
        "ApprovalPage",
        "ApprovalQuery",
        "DueBatch",
        "Fenced",
        "IntegrityError",
        "ListedSession",
        "LogRow",
        "NoChange",
        "OutboxRow",
        "Retention",
        "RetentionSweeper",
        "RetryTransaction",
        "SessionStore",
        "claim_due_batches",
        "conversation_at",
        "decisions_answer_row",
        "decisions_expiry_row",
        "decisions_queue",
        "enlist_message",
        "guard",
        "head_revision",
        "is_transient",
        "list_approvals",
        "list_checkpoints",
        "listen",
        "load_rows",
        "mark_rewound",
        "now_ms",
        "outbox_any_due",
        "outbox_claim",
        "outbox_deliver",
        "outbox_give_up",
        "outbox_purge",
        "outbox_queue",
        "outbox_retry",
        "outbox_skip",
        "patience",
        "read_pending_figures",
        "recent_sessions",
        "require_current_schema",
        "reuse_event",
        "touched_hibernated",
        "upgrade",
    ],
    "helix_dbos.observability": [],
}


@pytest.mark.parametrize("module", list(EXPORTS))
def test_exports_are_pinned(module: str) -> None:
    """Each package exports exactly the pinned names, and every one of them resolves."""
    mod = importlib.import_module(module)
    assert sorted(mod.__all__) == sorted(EXPORTS[module])
    for name in mod.__all__:
        assert getattr(mod, name) is not None, name


def all_modules() -> set[str]:
    """Every module of the installed package (``_alembic`` is the shipped migration folder)."""
    found = {"helix_dbos"}
    for info in pkgutil.walk_packages(helix_dbos.__path__, "helix_dbos."):
        if not info.name.startswith("helix_dbos._alembic."):
            found.add(info.name)
    found.discard("helix_dbos._alembic")
    return found


def documented(section: str) -> set[str]:
    """The backticked ``helix_dbos...`` modules of one ``##`` section of docs/public-api.md."""
    text = DOC.read_text()
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in body.splitlines() if line.startswith("| `helix_dbos")]
    return {
        name for row in rows for name in re.findall(r"`(helix_dbos[\w.]*)`", row.split(" | ")[0])
    }


def test_every_module_is_documented_public_or_internal() -> None:
    """docs/public-api.md places every module on one side of the line, and names no ghosts."""
    public, internal = documented("Public modules"), documented("Internal modules")
    assert public.isdisjoint(internal), public & internal
    assert public | internal == all_modules()


#: Public modules whose names are pinned by their own tests.
PINNED_ELSEWHERE = {
    "helix_dbos.runtime.names": "tests/runtime/test_names.py",
    "helix_dbos.runtime.records": "tests/runtime/test_records.py",
    "helix_dbos.cli": "tests/test_cli_migrate.py and tests/test_cli_sessions.py",
}


def test_every_public_module_is_pinned() -> None:
    """The documented public modules are exactly the pinned ones (here or in their tests)."""
    internal_packages = {"helix_dbos.store", "helix_dbos.observability"}
    assert documented("Public modules") == (set(EXPORTS) - internal_packages) | set(
        PINNED_ELSEWHERE
    )


def test_now_ms_lives_in_core_and_is_still_importable_from_the_store() -> None:
    """``now_ms`` moved to ``core.clock``; the store re-exports the same function."""
    from helix_dbos.core.clock import now_ms
    from helix_dbos.store.store import now_ms as from_store

    assert from_store is now_ms


def test_the_docs_import_definitions_from_helix_dbos() -> None:
    """One public path: every name of ``helix_dbos.core`` is a name of ``helix_dbos`` (the
    same object), and the README and the docs import them, and ``AgentRuntime``, from
    ``helix_dbos``, never from ``helix_dbos.core`` or ``helix_dbos.runtime``."""
    import helix_dbos.core

    for name in helix_dbos.core.__all__:
        assert getattr(helix_dbos, name) is getattr(helix_dbos.core, name), name
        assert name in helix_dbos.__all__, name
    root = Path(__file__).resolve().parents[1]
    for page in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        if page.name == "public-api.md":
            continue  # it names the modules themselves
        text = page.read_text()
        assert not re.search(r"^from helix_dbos\.core[.\w]* import", text, re.M), page.name
        assert "from helix_dbos.runtime import AgentRuntime" not in text, page.name
