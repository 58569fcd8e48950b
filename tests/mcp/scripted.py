"""The scripted model and the MCP server of files that the MCP tests share."""

from __future__ import annotations

import json
from typing import Any

from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.llm.scripted import call, reply
from helix_dbos.mcp import (
    MCPToolset,
    mcp_stdio,
)
from tests.mcp.conftest import SERVER, Journal, server_env


def script(request: LLMRequest) -> LLMResponse:
    """A user message ``[[tool, args], ...]`` calls those tools; then the reply lists what
    each call read, ``<errorCode or ok>: <content>``."""
    last = request.messages[-1]
    if last.role == "user":
        return call(request, *[(name, args) for name, args in json.loads(last.content)])
    tools = [m for m in request.messages if m.role == "tool"]
    return reply(" | ".join(f"{m.error_code or 'ok'}: {m.content}" for m in tools))


def files(journal: Journal, name: str = "files", **options: Any) -> MCPToolset:
    return mcp_stdio(name, SERVER, env=server_env(journal, name), **options)
