"""Every mutation the runtime passes to ``SessionStore.update`` may run several times
(ARCHITECTURE.md, rule 3): a lost compare-and-swap (on Postgres, at the batch's flush) runs the
whole transaction again, the mutation with it, on rows read again. So a mutation changes only
the rows it is given and reports through its return value: run twice on the same rows, it
changes them alike and returns the same. And it never calls out: no log line, metric, span,
wake-up, store call or I/O happens while it runs (a retried transaction would do it again,
and a rolled-back one would have done it for nothing).

``Twice`` runs each mutation of a turn's life that way: first on a copy of the rows, then on
the rows, and notes every difference. The scenarios below take each mutation in
``helix_dbos/runtime/`` at least once: every call of ``update`` there (found by reading the
source) must have been made.
"""

from __future__ import annotations

import ast
import asyncio
import copy
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from dbos import DBOS
from pydantic import BaseModel

import helix_dbos.runtime
from helix_dbos.core import ToolAsks, clock, define_agent, define_tool, tool_answers
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.core.session import SessionState
from helix_dbos.llm.scripted import ScriptedLLM, call, reply
from helix_dbos.observability.log import log_event
from helix_dbos.runtime import AgentRuntime
from helix_dbos.store.hibernated import claim_due
from helix_dbos.store.migrate import upgrade
from helix_dbos.store.store import NoChange, SessionStore
from tests.runtime.conftest import MakeRuntime
from tests.runtime.hibernation_worker import agent, completed, delegate_script, hibernated
from tests.runtime.hibernation_worker import script as hibernation_script
from tests.runtime.persistent_agents import keeper_agent
from tests.support.companions import lead_agent

Scope = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


@dataclass(frozen=True)
class Site:
    """A call of ``update`` in ``helix_dbos/runtime/``: its module, the function it is in
    (as ``co_qualname`` names it) and its lines."""

    module: str
    function: str
    first: int
    last: int

    def takes(self, module: str, function: str, line: int) -> bool:
        """Whether a call made from ``function`` of ``module`` at ``line`` is this one."""
        return (module, function) == (self.module, self.function) and (
            self.first <= line <= self.last
        )


def _qualname(stack: list[Scope]) -> str:
    """A function's qualified name from the definitions around it (``f.<locals>.g``)."""
    parts: list[str] = []
    for i, scope in enumerate(stack):
        parts.append(scope.name)
        if not isinstance(scope, ast.ClassDef) and i < len(stack) - 1:
            parts.append("<locals>")
    return ".".join(parts)


def _update_calls(node: ast.AST, stack: list[Scope], module: str) -> Iterator[Site]:
    """The ``update`` calls under ``node`` (``stack``: the definitions around it)."""
    for child in ast.iter_child_nodes(node):
        if (
            isinstance(child, ast.Call)
            and isinstance(child.func, ast.Attribute)
            and child.func.attr == "update"
            and len(child.args) >= 2  # ``update(ids, mutate, ...)``, not a dict's
        ):
            last = child.end_lineno or child.lineno
            yield Site(module, _qualname(stack), child.lineno, last)
        inner = [*stack, child] if isinstance(child, Scope) else stack
        yield from _update_calls(child, inner, module)


def _sites_in_runtime() -> list[Site]:
    """Every call of ``SessionStore.update`` in ``helix_dbos/runtime/``, each with a mutation."""
    found: list[Site] = []
    for path in sorted(Path(helix_dbos.runtime.__file__).parent.rglob("*.py")):
        found += _update_calls(ast.parse(path.read_text()), [], path.stem)
    return found


def test_the_runtimes_mutations_are_found() -> None:
    """The scan finds the runtime's mutations (a scan that found none would check nothing)."""
    sites = _sites_in_runtime()
    assert len(sites) >= 15
    assert {s.module for s in sites} >= {"control", "opening", "heal", "steps", "answer"}


class Twice:
    """Run every mutation given to ``SessionStore.update`` twice, on a copy of the rows and
    then on the rows; note the mutations seen and every difference between the two runs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: set[tuple[str, str, int]] = set()
        self.differences: list[str] = []
        self.calls_out: set[str] = set()
        original = SessionStore.update

        async def update(store: SessionStore, ids: Any, mutate: Any, **kwargs: Any) -> Any:
            caller = sys._getframe(1)  # the coroutine that awaits this one
            module = str(caller.f_globals.get("__name__", ""))
            site = (module.rpartition(".")[2], caller.f_code.co_qualname, caller.f_lineno)
            if module.startswith("helix_dbos.runtime."):
                self.calls.add(site)
            return await original(store, ids, self._wrap(mutate, site), **kwargs)

        monkeypatch.setattr(SessionStore, "update", update)

    def _wrap(
        self, mutate: Callable[[dict[str, SessionState]], Any], name: tuple[str, str, int]
    ) -> Callable[..., Any]:
        def twice(states: dict[str, SessionState]) -> Any:
            rows = {k: s.model_copy(deep=True) for k, s in states.items()}
            # A mutation may read the clock (an answer's time): each run of a retried
            # transaction reads it anew, so both runs here read it at one instant.
            home = str(getattr(mutate, "__module__", ""))
            with _one_instant(), _watching_calls_out(self.calls_out, name, home):
                first = _run(mutate, rows)
                try:
                    value = mutate(states)
                except NoChange as unchanged:
                    self._compare(name, first, ("no change", unchanged.value), rows, states)
                    raise
                except Exception as exc:
                    self._compare(name, first, ("raised", _raised(exc)), rows, states)
                    raise
            self._compare(name, first, ("value", value), rows, states)
            return value

        return twice

    def _compare(
        self,
        name: tuple[str, str, int],
        first: tuple[str, Any],
        second: tuple[str, Any],
        rows: dict[str, SessionState],
        states: dict[str, SessionState],
    ) -> None:
        if first != second:
            self.differences.append(f"{name}: {first!r}, then {second!r}")
        elif {k: s.model_dump() for k, s in rows.items()} != {
            k: s.model_dump() for k, s in states.items()
        }:
            self.differences.append(f"{name}: the two runs left different rows")


#: What a mutation must never call, by module: the log, metrics and spans, the store (but
#: ``swap``, whose ``guard`` and ``NoChange`` a mutation uses), wake-ups and notifications,
#: DBOS, the event loop, the database drivers, I/O.
_CALLING_OUT = (
    "helix_dbos.observability",
    "helix_dbos.store.",
    "helix_dbos.runtime._turn.wake",
    "helix_dbos.runtime._notifications",
    "dbos",
    "asyncio",
    "logging",
    "sqlalchemy",
    "psycopg",
    "aiosqlite",
    "opentelemetry",
    "prometheus_client",
    "socket",
    "_socket",
    "select",
    "io",
    "_io",
    "os",
    "posix",
    "subprocess",
)
_MAY_CALL = ("helix_dbos.store.swap",)
_BUILTINS_OUT = frozenset({"print", "open", "input"})


def _calls_out(module: str, function: str, home: str) -> bool:
    """Whether calling ``function`` of ``module`` is a call out of a mutation defined in the
    module ``home``: the mutation's own code (and its module's helpers) is not."""
    if module == "builtins":
        return function in _BUILTINS_OUT
    if module == home or module.startswith(_MAY_CALL):
        return False
    return any(
        module.startswith(m) if m.endswith(".") else module == m or module.startswith(m + ".")
        for m in _CALLING_OUT
    )


@contextmanager
def _watching_calls_out(found: set[str], name: tuple[str, str, int], home: str) -> Iterator[None]:
    """Within this block (a mutation's runs, synchronous), note in ``found`` every call out
    made on this thread: Python functions by their module, built-in ones by theirs.

    Only this thread, only while the mutation runs: a mutation is synchronous, so no other
    task of the event loop (a keeper's pass, a submit) runs meanwhile, and a keeper's own
    mutation is watched as its own (``home``: the module that defines the mutation, whose
    code is the mutation's, even in the store: the keeper's claim is ``store.hibernated``'s).
    """

    def hook(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            module = str(frame.f_globals.get("__name__", ""))
            function = frame.f_code.co_qualname
        elif event == "c_call":
            owner = getattr(arg, "__self__", None)
            module = getattr(arg, "__module__", None) or type(owner).__module__
            function = getattr(arg, "__qualname__", "?")
        else:
            return
        if _calls_out(module, function, home):
            found.add(f"{name}: {module}.{function}")

    before = sys.getprofile()
    sys.setprofile(hook)
    try:
        yield
    finally:
        sys.setprofile(before)


def test_a_call_out_of_a_mutation_is_seen() -> None:
    """The watch sees a log line and a file opened from a mutation, and not what a mutation
    may do (change its rows, read the clock, raise ``NoChange``)."""
    found: set[str] = set()
    state = SessionState(session_id="s", agent_type="a", root_session_id="s")
    with _watching_calls_out(found, ("m", "f", 1), __name__):
        state.metadata["k"] = clock.now_ms()
        NoChange(None)
    assert found == set()
    with _watching_calls_out(found, ("m", "f", 1), __name__):
        log_event("mutation.called_out", sessionId="s")
        with open(__file__) as source:
            source.read(1)
    assert "('m', 'f', 1): helix_dbos.observability.log.log_event" in found, found
    assert "('m', 'f', 1): io.open" in found, found


@contextmanager
def _one_instant() -> Iterator[None]:
    """Within this block, the framework's clock (``now_ms``, wherever it was imported) stands
    still. Mutations are synchronous: nothing else of the runtime runs meanwhile."""
    original = clock.now_ms
    at = original()
    # ``clock`` itself is among the modules patched: restore from the function kept here,
    # never from ``clock.now_ms`` (the stopped clock by then, which would stay for good).
    patched = [
        m
        for name, m in list(sys.modules.items())
        if name.startswith("helix_dbos") and getattr(m, "now_ms", None) is original
    ]
    for module in patched:
        module.now_ms = lambda: at  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for module in patched:
            module.now_ms = original  # type: ignore[attr-defined]


def test_the_clock_runs_again_after_an_instant() -> None:
    """``_one_instant`` stops the framework's clock for a mutation and restores it after, in
    every module, ``clock`` itself included (a clock left stopped made a later test in the
    same process read every deadline as not yet due)."""
    original = clock.now_ms
    with _one_instant():
        assert clock.now_ms is not original
    assert clock.now_ms is original
    stopped = [
        name
        for name, m in list(sys.modules.items())
        if name.startswith("helix_dbos") and getattr(m, "now_ms", original) is not original
    ]
    assert stopped == []


def _raised(exc: Exception) -> tuple[str, str]:
    return type(exc).__name__, str(exc)


def _run(
    mutate: Callable[[dict[str, SessionState]], Any], rows: dict[str, SessionState]
) -> tuple[str, Any]:
    """What one run of a mutation did: its value, the value of its ``NoChange``, or what it
    raised (by type and text); each as it was when the run returned."""
    try:
        return "value", copy.deepcopy(mutate(rows))
    except NoChange as unchanged:
        return "no change", copy.deepcopy(unchanged.value)
    except Exception as exc:
        return "raised", _raised(exc)


def _failing_once() -> ScriptedLLM:
    """``hot``'s model: the first "boom" fails the turn (the retry then answers)."""
    failed: list[bool] = []

    def run(request: LLMRequest) -> LLMResponse:
        if request.messages[-1].content == "boom" and not failed:
            failed.append(True)
            raise RuntimeError("the model broke")
        return hibernation_script(request)

    return ScriptedLLM(run)


class _Ask(BaseModel):
    topic: str


def _confirm(args: _Ask) -> dict[str, Any]:
    """A server tool that asks a person first (as an MCP tool answering ``input_required``)."""
    answers = tool_answers()
    if answers is None:
        raise ToolAsks({"sure": {"message": f"Sure about {args.topic}?"}})
    return {"confirmed": answers["responses"]["sure"]}


def _asking_script(request: LLMRequest) -> LLMResponse:
    last = request.messages[-1]
    if last.role == "user":
        return call(request, ("confirm", {"topic": "x"}))
    return reply("done")


def _asking_agent() -> Any:
    return define_agent(
        "asker",
        llm=ScriptedLLM(_asking_script),
        tools=[define_tool("confirm", "Confirm with a person", _Ask, execute=_confirm)],
        hibernate_after="never",
    )


async def _runtime(make_runtime: MakeRuntime) -> AgentRuntime:
    """``parent`` and its sub-agent ``cold`` hibernate at once; ``hot`` never does; ``keeper``
    is persistent, idle for a second at most; ``asker``'s server tool asks a person first."""
    cold = agent("cold")
    parent = define_agent(
        "parent", llm=ScriptedLLM(delegate_script), subagents=[cold], hibernate_after=0
    )
    hot = agent("hot", _failing_once(), hibernate_after="never")
    return await make_runtime(
        [parent, cold, hot, keeper_agent(idle_ttl=1.0), lead_agent(), _asking_agent()],
        heal_interval_seconds=0,
    )


async def _parked(rt: AgentRuntime) -> str:
    handle = await rt.start("hot", "1 edit")
    await rt.wait_for_pending(handle.session_id)
    return handle.session_id


async def _hibernated_tree(rt: AgentRuntime) -> None:
    """A sub-agent hibernates, its parent with it; the root's submit continues both."""
    handle = await rt.start("parent", "go")
    [pending] = await rt.wait_for_pending(handle.session_id)
    await hibernated(rt, str(pending["ownerSessionId"]))
    await hibernated(rt, handle.session_id)
    await rt.submit_tool_result(handle.session_id, pending["toolCallId"], result={"applied": 1})
    await completed(rt, handle)


async def _hot_turns(rt: AgentRuntime) -> None:
    """A message over a parked batch, the session's next turn, a stop, a turn that fails and
    its retry, and a workflow cancelled behind the runtime, ended by the reconciler."""
    sid = await _parked(rt)
    await rt.resume(sid, "with_message", "instead", abandon_pending=True)
    assert (await rt.wait(sid))["status"] == "completed"
    await rt.start("hot", "again", session_id=sid)
    assert (await rt.wait(sid))["status"] == "completed"
    assert (await rt.interrupt(await _parked(rt))).status == "interrupted"
    failing = await rt.start("hot", "boom")
    assert (await rt.wait(failing.session_id))["status"] == "failed"
    await rt.retry(failing.session_id)
    assert (await rt.wait(failing.session_id))["status"] == "completed"
    lost = await _parked(rt)
    await DBOS.cancel_workflow_async((await rt.session(lost)).workflow_id or "")
    assert [r.action for r in await rt.heal(grace_seconds=0)] == ["ended_cancelled"]


async def _asking_turns(rt: AgentRuntime) -> None:
    """A server tool that asks first: its question registered as a pending call, answered by
    the submit, the tool called again with the answer."""
    handle = await rt.start("asker", "go")
    [pending] = await rt.wait_for_pending(handle.session_id)
    await rt.submit_tool_result(handle.session_id, pending["toolCallId"], result={"ok": True})
    assert (await rt.wait(handle.session_id))["status"] == "completed"


async def _persistent_turns(rt: AgentRuntime) -> None:
    """A persistent session: a turn, one delivered to its workflow, its hibernation when
    idle, and a message after it."""
    first = await rt.start("keeper", "hello")
    sid = first.session_id
    assert (await rt.wait(sid))["status"] == "completed"
    second = await rt.start("keeper", "again", session_id=sid)
    await second.result()
    for _ in range(300):
        if "persistent" not in (await rt.session(sid)).metadata:
            break
        await asyncio.sleep(0.05)
    await rt.start("keeper", "awake", session_id=sid)
    assert (await rt.wait(sid))["status"] == "completed"


async def _companion_turns(rt: AgentRuntime) -> None:
    """A parent's send to its companion (the reference on its row), the companion's reply
    (kept or appended on the parent's row), and the companion's end."""
    handle = await rt.start("lead", "send reviewer: look")
    await handle.result()
    sid = handle.session_id
    for _ in range(300):
        if any(e.type == "companion_message" for e in await rt.events(sid)):
            break
        await asyncio.sleep(0.05)
    await (await rt.start("lead", "end reviewer", session_id=sid)).result()
    assert "companionEnded" in (await rt.session(f"{sid}.companion.reviewer")).metadata


async def test_every_mutation_does_the_same_when_run_twice(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each mutation, run twice on the same rows (as a retried transaction runs it), leaves
    them alike and returns the same; the scenarios take every mutation of the runtime."""
    twice = Twice(monkeypatch)
    rt = await _runtime(make_runtime)
    await _hibernated_tree(rt)
    await _hot_turns(rt)
    await _persistent_turns(rt)
    await _companion_turns(rt)
    await _asking_turns(rt)
    assert twice.differences == []
    assert twice.calls_out == set(), "a mutation called out (it would again on every re-run)"
    untaken = [s for s in _sites_in_runtime() if not any(s.takes(*call) for call in twice.calls)]
    assert untaken == [], "a mutation of the runtime no scenario here takes"


async def test_the_keepers_claim_calls_nothing_out(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keeper's claim on SQLite (``store.hibernated.claim_due``, a mutation of the store
    that the keeper passes to ``update`` once a second) runs under the watch as any mutation
    does: its own code is not a call out of it."""
    await asyncio.to_thread(upgrade, sqlite_url)
    twice = Twice(monkeypatch)
    store = SessionStore.from_url(sqlite_url)
    try:
        state = SessionState(
            session_id="due", agent_type="a", root_session_id="due", status="suspended_client_tool"
        )
        state.metadata["hibernated"] = {"at": 1, "workflowId": "w", "step": 0, "dueAt": 1_000}
        await store.create_session(state)
        claimed = await claim_due(store, "due", 5_000, 30_000)
    finally:
        await store.close()
    assert claimed is not None
    assert twice.differences == []
    assert twice.calls_out == set()
