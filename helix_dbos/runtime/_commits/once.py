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
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from contextvars import ContextVar
from typing import Any, Final, Generic, ParamSpec, TypeVar

from dbos import DBOS

from ...core.session import SessionState
from ...store import PENDING_CLEAR_ATTEMPTS, Fenced, IntegrityError
from .._context import current
from ..records import FENCED_KEY, CheckpointKind, FencedResult

__all__ = [
    "FENCED",
    "OnceStep",
    "after_commit",
    "commit_once",
    "exactly_once",
    "marker",
    "recorded",
]

R = TypeVar("R")
P = ParamSpec("P")

FENCED: Final = FENCED_KEY
"""The key of a step result whose commit was fenced: ``{"fenced": <reason>}``
(``records.FencedResult``)."""


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
    slot: str,
    session_id: str,
    run_id: str | None,
    step_count: int,
    body: Callable[[], Awaitable[R]],
    *,
    attempts: int = PENDING_CLEAR_ATTEMPTS,
    retry_event: str | None = None,
    failed_event: str | None = None,
    session_ids: list[str] | None = None,
    read_first: bool = True,
    read: Sequence[SessionState] = (),
) -> R:
    """Run ``body``'s writes and the checkpoint holding its result in one transaction.

    ``attempts`` bounds the retries on lost compare-and-swap races (logged as
    ``retry_event`` / ``failed_event`` with ``session_ids``). ``read_first=False`` skips the
    first attempt's read of the slot: for a body whose writes cannot land twice (its guard
    fails once it has committed, or the checkpoint's key refuses the second), the slot is read
    only when the body is fenced or the checkpoint already exists. A retried attempt always
    reads: the commit it retries may have landed. ``read``: session rows read before, which
    the body's updates swap from (``SessionStore.transact``).

    ``body`` may run several times (the transaction is retried as a whole); it writes only
    through the store (which joins the bound transaction) and logs nothing.

    Raises:
        Fenced: ``body``'s guard failed; nothing was written.
    """
    store = current().store
    attempts_made = 0
    effects: list[Callable[[], None]] = []

    async def attempt() -> R:
        nonlocal attempts_made
        attempts_made += 1
        effects.clear()  # what an attempt rolled back asked for is not done
        if read_first or attempts_made > 1:
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
    try:
        committed = await store.transact(
            attempt,
            read=read,
            attempts=attempts,
            retry_event=retry_event,
            failed_event=failed_event,
            log_fields={"sessionIds": session_ids or [session_id]},
        )
        _run_effects(effects)
        return committed
    except Fenced as fenced:
        if read_first:
            raise
        # The run moved on: maybe because this very commit landed (a replay).
        return await _result_of(slot, fenced)  # type: ignore[no-any-return]
    except IntegrityError as duplicate:
        # A concurrent execution of the same step committed first: its result is ours.
        return await _result_of(slot, duplicate)  # type: ignore[no-any-return]
    finally:
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
    is the step's own); ``direct(slot, ...)`` runs it as plain workflow code under an explicit,
    replay-stable slot (layout 2: our checkpoint alone makes it exactly-once, no DBOS step
    records it).
    """

    def __init__(
        self,
        fn: Callable[P, Coroutine[Any, Any, R]],
        name: str,
        kind: CheckpointKind,
        *,
        session_param: str,
        run_param: str,
        retry_event: str | None,
        failed_event: str | None,
        read_first: bool,
    ) -> None:
        self._fn = fn
        self._read_first = read_first
        self._kind = kind
        self._signature = inspect.signature(fn)
        self._session_param = session_param
        self._run_param = run_param
        self._retry_event = retry_event
        self._failed_event = failed_event
        functools.update_wrapper(self, fn)

        async def as_step(*args: P.args, **kwargs: P.kwargs) -> R | FencedResult:
            return await self.direct(marker(kind), *args, **kwargs)

        self._step = DBOS.step(name=name)(as_step)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Awaitable[R | FencedResult]:
        return self._step(*args, **kwargs)

    async def direct(self, slot: str, *args: P.args, **kwargs: P.kwargs) -> R | FencedResult:
        """Run the commit under ``slot`` (no DBOS step); ``{"fenced": reason}`` if fenced."""
        bound = self._signature.bind(*args, **kwargs).arguments
        try:
            return await commit_once(
                slot,
                str(bound[self._session_param]),
                str(bound[self._run_param]),
                0,
                lambda: self._fn(*args, **kwargs),
                retry_event=self._retry_event,
                failed_event=self._failed_event,
                session_ids=_session_ids(bound, self._session_param),
                read_first=self._read_first,
            )
        except Fenced as fenced:
            return {FENCED: fenced.reason}


def exactly_once(
    name: str,
    kind: CheckpointKind,
    *,
    session_param: str = "session_id",
    run_param: str = "run_id",
    retry_event: str | None = None,
    failed_event: str | None = None,
    read_first: bool = True,
) -> Callable[[Callable[P, Coroutine[Any, Any, R]]], OnceStep[P, R]]:
    """Make ``fn`` an exactly-once commit (see ``OnceStep``), registered as DBOS step ``name``.
    ``read_first``: see ``commit_once``.

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
            retry_event=retry_event,
            failed_event=failed_event,
            read_first=read_first,
        )

    return wrap
