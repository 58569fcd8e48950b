"""The Model Context Protocol: an MCP server's tools in an agent (docs/mcp.md).

Needs the ``mcp`` extra (``pip install 'helix-dbos[mcp]'``).
"""

from .toolset import (
    IDEMPOTENCY_META_KEY,
    MCP_SERVER_UNAVAILABLE,
    MCP_TOOL_ERROR,
    MCPTool,
    MCPToolset,
    mcp_http,
    mcp_stdio,
)

__all__ = [
    "IDEMPOTENCY_META_KEY",
    "MCP_SERVER_UNAVAILABLE",
    "MCP_TOOL_ERROR",
    "MCPTool",
    "MCPToolset",
    "mcp_http",
    "mcp_stdio",
]
