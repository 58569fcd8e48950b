"""Every mutation the runtime passes to ``SessionStore.update`` may run several times
(ARCHITECTURE.md, rule 3): a lost compare-and-swap (on Postgres, at the batch's flush) runs the
whole transaction again, the mutation with it, on rows read again. So a mutation changes only
the rows it is given and reports through its return value: run twice on the same rows, it
changes them alike and returns the same.

``Twice`` runs each mutation of a turn's life that way: first on a copy of the rows, then on
the rows, and notes every difference. The scenarios below take each mutation in
``helix_dbos/runtime/`` at least once (a static count of the call sites keeps the list whole).
"""

from __future__ import annotations

import ast
import asyncio
import copy
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from dbos import DBOS

import helix_dbos.runtime
from helix_dbos.core import clock, define_agent
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.core.session import SessionState
from helix_dbos.llm.scripted import ScriptedLLM
from helix_dbos.runtime import AgentRuntime
from helix_dbos.store.store import NoChange, SessionStore
from tests.runtime.conftest import MakeRuntime
from tests.runtime.hibernation_worker import agent, completed, delegate_script, hibernated
from tests.runtime.hibernation_worker import script as hibernation_script
from tests.runtime.persistent_agents import keeper_agent

#: The runtime's mutations, by module and qualified name (``_mutations_in_runtime`` finds them).
MUTATIONS = {
    ("control", "stash_entry.<locals>.stash"),
    ("control", "stop_tree.<locals>.record"),
    ("entry", "_start_child.<locals>.parent_live"),
    ("entry", "open_turn.<locals>.claim"),
    ("heal", "_claim.<locals>.mutate"),
    ("hibernation", "child_ended.<locals>.report"),
    ("hibernation", "hibernate.<locals>.body.<locals>.swap"),
    ("lifecycle", "_commit.<locals>.commit"),
    ("persistent", "deliver.<locals>.body.<locals>.<lambda>"),
    ("persistent", "hibernate.<locals>.swap"),
    ("steps", "_commit_model.<locals>.register"),
    ("steps", "commit_results.<locals>.fence"),
    ("steps", "commit_results.<locals>.settle"),
    ("steps", "finish_turn.<locals>.finish"),
    ("submit", "_submit.<locals>.store_and_send.<locals>.at_owner"),
    ("submit", "_submit.<locals>.store_and_send.<locals>.at_root"),
}

Scope = ast.FunctionDef | ast.AsyncFunctionDef


def _defines(scope: Scope, name: str) -> bool:
    """Whether ``scope`` defines the function ``name`` itself (not in a nested function)."""
    todo: list[ast.AST] = list(scope.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if node.name == name:
                return True
            continue
        todo.extend(ast.iter_child_nodes(node))
    return False


def _mutation_of(call: ast.Call, stack: list[Scope], module: ast.Module) -> str:
    """The qualified name of the mutation an ``update`` call passes."""
    arg = call.args[1]
    if isinstance(arg, ast.Lambda):
        return ".<locals>.".join([*(f.name for f in stack), "<lambda>"])
    assert isinstance(arg, ast.Name), ast.dump(arg)
    for depth in range(len(stack), 0, -1):
        if _defines(stack[depth - 1], arg.id):
            return ".<locals>.".join([*(f.name for f in stack[:depth]), arg.id])
    # A mutation made by a factory: ``name = factory(...)``, ``factory`` returning its own.
    for node in ast.walk(stack[-1]):
        if (
            isinstance(node, ast.Assign)
            and [getattr(t, "id", None) for t in node.targets] == [arg.id]
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
        ):
            factory = next(
                f for f in ast.walk(module) if isinstance(f, Scope) and f.name == node.value.func.id
            )
            [made] = [
                r.value.id
                for r in ast.walk(factory)
                if isinstance(r, ast.Return) and isinstance(r.value, ast.Name)
            ]
            return f"{factory.name}.<locals>.{made}"
    raise AssertionError(f"no function {arg.id} around the update call")


def _update_calls(node: ast.AST, stack: list[Scope], tree: ast.Module) -> Iterator[str]:
    """The mutations of the ``update`` calls under ``node`` (``stack``: the functions around)."""
    for child in ast.iter_child_nodes(node):
        if (
            isinstance(child, ast.Call)
            and isinstance(child.func, ast.Attribute)
            and child.func.attr == "update"
            and len(child.args) >= 2
        ):
            yield _mutation_of(child, stack, tree)
        yield from _update_calls(
            child, [*stack, child] if isinstance(child, Scope) else stack, tree
        )


def _mutations_in_runtime() -> tuple[set[tuple[str, str]], int]:
    """Every mutation passed to ``update`` in ``helix_dbos/runtime/``, and the call sites."""
    found: set[tuple[str, str]] = set()
    sites = 0
    for path in sorted(Path(helix_dbos.runtime.__file__).parent.glob("*.py")):
        tree = ast.parse(path.read_text())
        for name in _update_calls(tree, [], tree):
            sites += 1
            found.add((path.stem, name))
    return found, sites


def test_the_list_of_mutations_is_whole() -> None:
    """The scenarios below are checked against every mutation the runtime has: a new one is
    listed here, and taken by a scenario."""
    found, sites = _mutations_in_runtime()
    assert found == MUTATIONS
    assert sites == 17  # the persistent delivery passes two lambdas


class Twice:
    """Run every mutation given to ``SessionStore.update`` twice, on a copy of the rows and
    then on the rows; note the mutations seen and every difference between the two runs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: set[tuple[str, str]] = set()
        self.differences: list[str] = []
        original = SessionStore.update

        async def update(store: SessionStore, ids: Any, mutate: Any, **kwargs: Any) -> Any:
            return await original(store, ids, self._wrap(mutate), **kwargs)

        monkeypatch.setattr(SessionStore, "update", update)

    def _wrap(self, mutate: Callable[[dict[str, SessionState]], Any]) -> Callable[..., Any]:
        name = (mutate.__module__.rpartition(".")[2], mutate.__qualname__)

        def twice(states: dict[str, SessionState]) -> Any:
            self.seen.add(name)
            rows = {k: s.model_copy(deep=True) for k, s in states.items()}
            # A mutation may read the clock (an answer's time): each run of a retried
            # transaction reads it anew, so both runs here read it at one instant.
            with _one_instant():
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
        name: tuple[str, str],
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


@contextmanager
def _one_instant() -> Iterator[None]:
    """Within this block, the framework's clock (``now_ms``, wherever it was imported) stands
    still. Mutations are synchronous: nothing else of the runtime runs meanwhile."""
    at = clock.now_ms()
    patched = [
        m
        for name, m in list(sys.modules.items())
        if name.startswith("helix_dbos") and getattr(m, "now_ms", None) is clock.now_ms
    ]
    for module in patched:
        module.now_ms = lambda: at  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for module in patched:
            module.now_ms = clock.now_ms  # type: ignore[attr-defined]


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


async def _runtime(make_runtime: MakeRuntime) -> AgentRuntime:
    """``parent`` and its sub-agent ``cold`` hibernate at once; ``hot`` never does; ``keeper``
    is persistent, idle for a second at most."""
    cold = agent("cold")
    parent = define_agent(
        "parent", llm=ScriptedLLM(delegate_script), subagents=[cold], hibernate_after=0
    )
    hot = agent("hot", _failing_once(), hibernate_after="never")
    return await make_runtime(
        [parent, cold, hot, keeper_agent(idle_ttl=1.0)], heal_interval_seconds=0
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
    assert twice.differences == []
    assert MUTATIONS - twice.seen == set()
