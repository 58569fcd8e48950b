"""Exactly-once commits: a step's session writes commit with a checkpoint of its result.

The writes of a commit land in ONE transaction with a checkpoint row
(``__agents_checkpoints``) keyed by the commit's slot in its workflow that holds its result.
The transaction first reads the slot's checkpoint: a re-execution (a replay after a crash; a
commit whose acknowledgement was lost to a dropped connection) returns the recorded result
without writing again, and a concurrent duplicate loses on the checkpoint's primary key and
reads the winner's result. So the checkpoint alone makes the commit exactly-once: in the turn's
layout 2 (``names.TURN_LAYOUT``) the commit is plain workflow code under ``names.turn_slot``;
in layout 1 it is a DBOS step (slot ``<workflow id>:<step id>:<kind>``) that DBOS records too.

The transaction is the store's unit of work, ``transact``: every store call the body makes
joins it (a write cannot miss the step's connection), it is retried as a whole on a
lost race or a transient database fault, and a failed guard (``Fenced``: the run was stopped
or superseded) rolls it back so the step writes nothing.

A commit takes what it is about (its session, its run, its body) and one ``CommitContext``:
its slot and everything that makes it fast (the rows read before it, the inputs it hands on
to the next model step, the continuing workflow its row names). Its body reads the context
back with ``running()``; nothing else of a commit's signature is about speed. Whether a
commit reads its slot first and how it retries are its ``Policy``, fixed by its kind.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final, Generic, ParamSpec, TypeVar

from dbos import DBOS

from ...core.session import SessionState
from ...store import PENDING_CLEAR_ATTEMPTS, Fenced, IntegrityError
from .._context import current
from .._handover import EntryInputs, Resumption
from ..records import FENCED_KEY, CheckpointKind, FencedResult

__all__ = [
    "FENCED",
    "CommitContext",
    "OnceStep",
    "Policy",
    "after_commit",
    "commit_once",
    "exactly_once",
    "marker",
    "recorded",
    "running",
]

R = TypeVar("R")
P = ParamSpec("P")

FENCED: Final = FENCED_KEY
"""The key of a step result whose commit was fenced: ``{"fenced": <reason>}``
(``records.FencedResult``)."""


@dataclass(frozen=True, slots=True)
class CommitContext:
    """Where one commit lands and what it starts from: the value its caller hands it, so that
    the commit's own signature says only what it writes.

    ``slot``: the checkpoint id (``names.turn_slot``, ``marker``). The rest only saves work
    and never changes what lands: ``read``, session rows read before the commit, which its
    updates swap from instead of reading them again (``SessionStore.transact``; first attempt
    only); ``inputs``, the inputs of a model step as the commit before it left them, so the
    step reads nothing back (``_handover``); ``resumption``, a woken turn's rows and
    conversation, which its results commit swaps from and hands on to the next model step
    (``_handover.Resumption``); ``rebind``, the continuation workflow of a hibernated turn,
    which its results commit names on the row (the continuation runs in the first workflow's
    slots, so the slot alone does not say who runs it).
    """

    slot: str
    read: Sequence[SessionState] = ()
    inputs: EntryInputs | None = None
    resumption: Resumption | None = None
    rebind: str | None = None


@dataclass(frozen=True, slots=True)
class Policy:
    """How a kind of commit runs, fixed by its body, not by its caller.

    ``read_first=False`` skips the first attempt's read of the slot: for a body whose writes
    cannot land twice (its guard fails once it has committed, or the checkpoint's key refuses
    the second), the slot is read only when the body is fenced or the checkpoint already
    exists; a retried attempt always reads (the commit it retries may have landed).
    ``attempts`` bounds the retries on lost compare-and-swap races, logged as
    ``retry_event`` / ``failed_event``.
    """

    read_first: bool = True
    attempts: int = PENDING_CLEAR_ATTEMPTS
    retry_event: str | None = None
    failed_event: str | None = None


_running: ContextVar[CommitContext | None] = ContextVar("helix_commit", default=None)


def running() -> CommitContext:
    """Within an exactly-once commit's body: the context its caller handed it."""
    context = _running.get()
    assert context is not None, "only inside an exactly-once commit"
    return context


#: The effects the running commit's body asked for once it lands (``after_commit``).
_effects: ContextVar[list[Callable[[], None]] | None] = ContextVar("helix_effects", default=None)


def after_commit(effect: Callable[[], None]) -> None:
    """Within an exactly-once commit's body: run ``effect`` once the commit has landed.

    For effects of this process only (live metrics): never for an attempt rolled back and
    retried, never for an execution that returns the recorded result (a replay). An effect
    that raises is dropped; the commit stands.
    """
    effects = _effects.get()
    assert effects is not None, "only inside an exactly-once step commit"
    effects.append(effect)


def _run_effects(effects: list[Callable[[], None]]) -> None:
    for effect in effects:
        try:
            effect()
        except Exception:  # an observation must never fail the turn whose write committed
            continue


def marker(kind: CheckpointKind) -> str:
    """The checkpoint id of this step's writes: its slot in its workflow (replay-stable)."""
    return f"{DBOS.workflow_id}:{DBOS.step_id}:{kind}"


async def recorded(slot: str) -> dict[str, Any] | None:
    """The checkpoint of an earlier execution of this step, if its writes committed."""
    return await current().store.get_checkpoint(slot)


async def commit_once(
    context: CommitContext,
    session_id: str,
    run_id: str | None,
    body: Callable[[], Awaitable[R]],
    *,
    step_count: int = 0,
    policy: Policy = Policy(),
    session_ids: Sequence[str] = (),
) -> R:
    """Run ``body``'s writes and the checkpoint holding its result (under ``context.slot``,
    filed under ``session_id`` and ``run_id`` with ``step_count``) in one transaction.

    ``body`` may run several times (the transaction is retried as a whole); it writes only
    through the store (which joins the bound transaction) and logs nothing. It reads
    ``context`` back with ``running()``. ``session_ids``: the rows it writes, for the log
    lines of its retries (default: ``session_id``).

    Raises:
        Fenced: ``body``'s guard failed; nothing was written.
    """
    store = current().store
    slot = context.slot
    attempts_made = 0
    effects: list[Callable[[], None]] = []
    read: Sequence[SessionState] = context.read
    if context.resumption is not None:
        read = [*read, *context.resumption.read()]

    async def attempt() -> R:
        nonlocal attempts_made
        attempts_made += 1
        effects.clear()  # what an attempt rolled back asked for is not done
        if policy.read_first or attempts_made > 1:
            done = await store.get_checkpoint(slot)
            if done is not None:
                return done["state"]["result"]  # type: ignore[no-any-return]
        with store.pointing(session_id, slot) as pointed:
            # A compare-and-swap of the step's own session row also moves its checkpoint
            # pointer here: the checkpoint needs no UPDATE of its own.
            result = await body()
        await store.write_checkpoint(
            session_id,
            run_id,
            step_count=step_count,
            state={"result": result},
            checkpoint_id=slot,
            pointed=pointed.done,
        )
        return result

    token = _effects.set(effects)
    running_token = _running.set(context)
    try:
        committed = await store.transact(
            attempt,
            read=read,
            attempts=policy.attempts,
            retry_event=policy.retry_event,
            failed_event=policy.failed_event,
            log_fields={"sessionIds": list(session_ids) or [session_id]},
        )
        _run_effects(effects)
        return committed
    except Fenced as fenced:
        if policy.read_first:
            raise
        # The run moved on: maybe because this very commit landed (a replay).
        return await _result_of(slot, fenced)  # type: ignore[no-any-return]
    except IntegrityError as duplicate:
        # A concurrent execution of the same step committed first: its result is ours.
        return await _result_of(slot, duplicate)  # type: ignore[no-any-return]
    finally:
        _running.reset(running_token)
        _effects.reset(token)


async def _result_of(slot: str, failure: Exception) -> Any:
    """The result recorded under ``slot`` by the execution that committed it; ``failure``
    raised again if none did."""
    done = await recorded(slot)
    if done is None:
        raise failure
    return done["state"]["result"]


def _session_ids(arguments: dict[str, Any], session_param: str) -> list[str]:
    """The session rows a step writes, for its log lines: its own, and its root's."""
    ids = [str(arguments[session_param])]
    root = arguments.get("root_session_id")
    if root is not None and root not in ids:
        ids.append(str(root))
    return ids


class OnceStep(Generic[P, R]):
    """An exactly-once commit, callable in either turn layout (``names.TURN_LAYOUT``).

    Calling it runs the commit as a DBOS step named ``name`` (layout 1: the checkpoint slot
    is the step's own); ``direct(context, ...)`` runs it as plain workflow code under the
    context's explicit, replay-stable slot (layout 2: our checkpoint alone makes it
    exactly-once, no DBOS step records it).
    """

    def __init__(
        self,
        fn: Callable[P, Coroutine[Any, Any, R]],
        name: str,
        kind: CheckpointKind,
        *,
        session_param: str,
        run_param: str,
        policy: Policy,
    ) -> None:
        self._fn = fn
        self._policy = policy
        self._kind = kind
        self._signature = inspect.signature(fn)
        self._session_param = session_param
        self._run_param = run_param
        functools.update_wrapper(self, fn)

        async def as_step(*args: P.args, **kwargs: P.kwargs) -> R | FencedResult:
            return await self.direct(CommitContext(marker(kind)), *args, **kwargs)

        self._step = DBOS.step(name=name)(as_step)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Awaitable[R | FencedResult]:
        return self._step(*args, **kwargs)

    async def direct(
        self, context: CommitContext, *args: P.args, **kwargs: P.kwargs
    ) -> R | FencedResult:
        """Run the commit under ``context`` (no DBOS step); ``{"fenced": reason}`` if fenced."""
        bound = self._signature.bind(*args, **kwargs).arguments
        try:
            return await commit_once(
                context,
                str(bound[self._session_param]),
                str(bound[self._run_param]),
                lambda: self._fn(*args, **kwargs),
                policy=self._policy,
                session_ids=_session_ids(bound, self._session_param),
            )
        except Fenced as fenced:
            return {FENCED: fenced.reason}


def exactly_once(
    name: str,
    kind: CheckpointKind,
    *,
    session_param: str = "session_id",
    run_param: str = "run_id",
    policy: Policy = Policy(),
) -> Callable[[Callable[P, Coroutine[Any, Any, R]]], OnceStep[P, R]]:
    """Make ``fn`` an exactly-once commit (see ``OnceStep``), registered as DBOS step ``name``,
    run by ``policy``.

    The checkpoint is filed under the arguments named ``session_param`` and ``run_param``
    (bound by name, so positional and keyword calls file the same). A fenced commit returns
    ``{"fenced": reason}`` (recorded, so a replay sees the same).
    """

    def wrap(fn: Callable[P, Coroutine[Any, Any, R]]) -> OnceStep[P, R]:
        return OnceStep(
            fn,
            name,
            kind,
            session_param=session_param,
            run_param=run_param,
            policy=policy,
        )

    return wrap
