"""A small MCP server for the tests, on the real ``mcp`` SDK: over stdio (the default) or
Streamable HTTP (``--http PORT``, behind a bearer token ``--token``).

Its tools: ``echo`` and ``add`` (read-only), ``delete_file`` (destructive), ``crash`` (the
server kills itself mid-call), ``flaky`` (kills itself on its first call only), and three
that answer ``input_required``: ``confirm`` (one form), ``wipe`` (a confirmation: one boolean
field) and ``survey`` (two rounds, each with its own request state, sealed under a key fixed
here so that a restarted server takes the next round). Each call is
journaled, one JSON line with its tool, arguments and the idempotency key of its ``_meta``,
in the file ``HELIX_MCP_JOURNAL`` names; ``HELIX_MCP_LABEL`` names the server in ``echo``'s
answer (two servers with the same tools tell apart).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.request_state import RequestStateSecurity
from mcp_types import ElicitRequest, ElicitRequestFormParams, InputRequiredResult, ToolAnnotations

KEY = "io.helix-dbos/idempotencyKey"
LABEL = os.environ.get("HELIX_MCP_LABEL", "server")
JOURNAL = os.environ.get("HELIX_MCP_JOURNAL")

# One key for every process of the server: state sealed before a restart is accepted after.
SECURITY = RequestStateSecurity(keys=[b"helix-dbos test server request-state"])
server = MCPServer("helix-test-" + LABEL, request_state_security=SECURITY)
READ_ONLY = ToolAnnotations(readOnlyHint=True)


def journal(tool: str, args: dict[str, Any], ctx: Context) -> None:
    if JOURNAL is None:
        return
    meta = ctx.request_context.meta or {}
    line = {"tool": tool, "args": args, "key": meta.get(KEY), "pid": os.getpid()}
    with open(JOURNAL, "a") as out:
        out.write(json.dumps(line) + "\n")


@server.tool(annotations=READ_ONLY)
def echo(text: str, ctx: Context) -> str:
    """Say the text back, with the server's label."""
    journal("echo", {"text": text}, ctx)
    return f"{LABEL}: {text}"


@server.tool(annotations=READ_ONLY)
def add(a: int, b: int, ctx: Context) -> int:
    """Add two integers."""
    journal("add", {"a": a, "b": b}, ctx)
    return a + b


@server.tool(annotations=ToolAnnotations(destructiveHint=True))
def delete_file(path: str, ctx: Context) -> str:
    """Delete a file (here: only say so)."""
    journal("delete_file", {"path": path}, ctx)
    return f"deleted {path}"


@server.tool(annotations=READ_ONLY)
def crash(ctx: Context) -> str:
    """Kill this server while the call runs."""
    journal("crash", {}, ctx)
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


@server.tool(annotations=READ_ONLY)
def flaky(ctx: Context) -> str:
    """Kill this server on the first call; answer the next ones."""
    journal("flaky", {}, ctx)
    marker = Path(str(JOURNAL) + ".flaky")
    if not marker.exists():
        marker.write_text("crashed once")
        os.kill(os.getpid(), signal.SIGKILL)
    return "flaky answered"


@server.tool(annotations=READ_ONLY)
def confirm(ctx: Context) -> str | InputRequiredResult:
    """Ask the user to confirm, with a form (a multi-round-trip request)."""
    answers = ctx.input_responses or {}
    journal("confirm", {"answered": sorted(answers)}, ctx)
    if "sure" in answers:
        answer = answers["sure"]
        action = getattr(answer, "action", None)
        if action != "accept":
            return f"not confirmed ({action})"
        return f"confirmed: {json.dumps(getattr(answer, 'content', None))}"
    fields = {"ok": {"type": "boolean"}, "note": {"type": "string"}}
    form = ElicitRequestFormParams(
        message="Sure?", requested_schema={"type": "object", "properties": fields}
    )
    # No request state: a restarted server (a new process) takes the retry all the same.
    return InputRequiredResult(input_requests={"sure": ElicitRequest(params=form)})


def _form(message: str, fields: dict[str, Any]) -> ElicitRequest:
    schema = {"type": "object", "properties": fields, "required": list(fields)}
    return ElicitRequest(params=ElicitRequestFormParams(message=message, requested_schema=schema))


@server.tool(annotations=READ_ONLY)
def wipe(path: str, ctx: Context) -> str | InputRequiredResult:
    """Wipe a file once the user confirms (a form of one boolean field: a confirmation)."""
    answers = ctx.input_responses or {}
    journal("wipe", {"path": path, "answered": sorted(answers)}, ctx)
    if "really" in answers:
        answer = answers["really"]
        content = getattr(answer, "content", None) or {}
        if getattr(answer, "action", None) == "accept" and content.get("really") is True:
            return f"wiped {path}"
        return f"kept {path}"
    form = _form(f"Really wipe {path}?", {"really": {"type": "boolean"}})
    return InputRequiredResult(input_requests={"really": form})


@server.tool(annotations=READ_ONLY)
def survey(ctx: Context) -> str | InputRequiredResult:
    """Ask a name, then (a second round, with new request state) a colour, then answer."""
    answers = ctx.input_responses or {}
    state = ctx.request_state or ""
    journal("survey", {"answered": sorted(answers), "state": state}, ctx)

    def given(key: str) -> Any:
        answer = answers.get(key)
        return (getattr(answer, "content", None) or {}).get(key)

    if state.startswith("asked-colour:") and given("colour"):
        return f"{state.partition(':')[2]} likes {given('colour')}"
    if state == "asked-name" and given("name"):
        form = _form(f"Favourite colour of {given('name')}?", {"colour": {"type": "string"}})
        return InputRequiredResult(
            input_requests={"colour": form}, request_state=f"asked-colour:{given('name')}"
        )
    form = _form("Your name?", {"name": {"type": "string"}})
    return InputRequiredResult(input_requests={"name": form}, request_state="asked-name")


def _guarded(app: Any, token: str) -> Any:
    """The app, refusing a request without ``Authorization: Bearer <token>`` (401)."""

    async def guard(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization") != f"Bearer {token}".encode():
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await app(scope, receive, send)

    return guard


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=None)
    parser.add_argument("--token", default="secret")
    options = parser.parse_args()
    if options.http is None:
        server.run()
        return
    import uvicorn

    app = _guarded(server.streamable_http_app(stateless_http=True), options.token)
    uvicorn.run(app, host="127.0.0.1", port=options.http, log_level="warning")


if __name__ == "__main__":
    main()
