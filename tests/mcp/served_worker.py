"""A child process serving the agents at ``/mcp``, for the fleet and crash tests.

``python -m tests.mcp.served_worker DATABASE_URL PORT EXECUTOR``: the ``banker`` agent (its
``transfer`` behind an approval; each run appended as a JSON line to the file
``MCP_BANK_LOG`` names) on a runtime of executor ``EXECUTOR`` (fixed version), served by
uvicorn on ``PORT`` behind the tests' tenant hook (the ``x-tenant`` header).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import uvicorn
from fastapi import FastAPI
from starlette.requests import Request

from helix_dbos.config import HelixSettings
from helix_dbos.core.agents import define_agent
from helix_dbos.core.tools import define_tool
from helix_dbos.http import lifespan_for
from helix_dbos.http.mcp_route import MCPEndpoint, mount_mcp
from helix_dbos.llm.scripted import ScriptedLLM
from helix_dbos.runtime import AgentRuntime
from tests.support.bank import Transfer, script

VERSION = "mcp-served-1"


def tenant_hook(request: Request, operation: str) -> Any:
    tenant = request.headers.get("x-tenant")
    return {"ok": True, "principal": f"user@{tenant}", "tenant": tenant} if tenant else False


def transfer(args: Transfer) -> dict[str, Any]:
    with open(os.environ["MCP_BANK_LOG"], "a") as out:
        out.write(json.dumps({"pid": os.getpid(), **args.model_dump()}) + "\n")
    return {"transferred": args.amount, "to": args.to}


def main() -> None:
    url, port, executor = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    gated = define_tool("transfer", "Move money", Transfer, execute=transfer, require_approval=True)
    banker = define_agent("banker", llm=ScriptedLLM(script), tools=[gated])
    settings = HelixSettings(database_url=url, executor_id=executor, application_version=VERSION)
    runtime = AgentRuntime([banker], settings)
    app = FastAPI(lifespan=lifespan_for(runtime))
    mount_mcp(app, MCPEndpoint(runtime, authenticate=tenant_hook))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
