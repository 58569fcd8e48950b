"""Sending a message to a parked turn, with an in-process fast path.

The durable path is always ``DBOS.send_async``: the message row is committed, and Postgres
NOTIFY (or SQLite polling) wakes the waiter wherever it runs. When the waiter is parked in
THIS process, we also signal its in-memory waiter right after the commit, which saves the
NOTIFY round trip (and up to a whole polling interval on SQLite). If DBOS's internals ever
change shape, the fast path quietly does nothing and the durable path still wakes the turn.

A message that must commit with the store's writes (a submit's answer, a persistent session's
inbox entry) is enlisted in the store's unit of work instead (``send_in_transaction``).
"""

from __future__ import annotations

from typing import Any

from ...errors import StaleStateError
from ...observability.log import log_event
from ...store import enlist_message
from .._context import RuntimeContext
from ..records import InboxMessage, TurnMessage

__all__ = ["enlist", "local_waiter", "send_in_transaction", "send_to_turn", "wake_local"]


def local_waiter(workflow_id: str, topic: str) -> Any | None:
    """The in-memory signal of a ``recv`` waiting in this process on ``(workflow_id, topic)``.

    The one read of DBOS internals (DBOS has no public API for it): the system database's map
    of waiting ``recv`` calls, keyed ``<workflow id>::<topic>``. ``None`` when nothing waits
    here, or when DBOS has changed shape; ``tests/runtime/test_wake.py`` fails in that case.
    """
    try:
        from dbos._dbos import _get_dbos_instance

        return _get_dbos_instance()._sys_db.notifications_map.get(f"{workflow_id}::{topic}")
    except Exception:
        return None


def wake_local(workflow_id: str, topic: str) -> bool:
    """Signal a ``recv`` waiting in this process on ``(workflow_id, topic)``; ``True`` if one was.

    Call it only after the message is committed: a woken ``recv`` reads its message at once.
    """
    signal = local_waiter(workflow_id, topic)
    if signal is None:
        return False
    signal.set()
    return True


async def send_to_turn(
    ctx: RuntimeContext, workflow_id: str, message: TurnMessage | InboxMessage, topic: str, key: str
) -> None:
    """``DBOS.send_async`` with an idempotency key, then the in-process wake-up."""
    await ctx.dbos().send_async(workflow_id, message, topic=topic, idempotency_key=key)
    if ctx.messenger is None:
        wake_local(workflow_id, topic)


class SendNotEnlisted(Exception):
    """The wake-up could not be enlisted in the answer's transaction (logged)."""


async def send_in_transaction(
    ctx: RuntimeContext,
    workflow_id: str,
    message: TurnMessage | InboxMessage,
    topic: str,
    key: str,
    **log_fields: Any,
) -> None:
    """Enlist the message in the store's unit of work bound to the task: it becomes visible
    exactly when the answer commits (``enlist``).

    No savepoint (two round trips on every submit): a failure is logged as
    ``client_tool.send_event_failed`` and raised as ``SendNotEnlisted``; the caller runs its
    unit again without the send and sends after the commit instead. A lost compare-and-swap
    of the unit's own writes is raised as it is.
    """
    try:
        await enlist(ctx, workflow_id, message, topic, key)
    except StaleStateError:
        raise
    except Exception as exc:
        log_event(
            "client_tool.send_event_failed",
            workflowId=workflow_id,
            toolCallId=topic,
            error=f"{type(exc).__name__}: {exc}",
            **log_fields,
        )
        raise SendNotEnlisted(str(exc)) from exc


async def enlist(
    ctx: RuntimeContext,
    workflow_id: str,
    message: TurnMessage | InboxMessage,
    topic: str,
    key: str,
) -> None:
    """Write the message to ``workflow_id`` in the unit of work, as the unit's last write,
    keyed as ``DBOS.send(..., idempotency_key=key)`` keys it (``store/dbos_messages.py`` owns
    DBOS's row format).

    Raises:
        sqlalchemy.exc.IntegrityError: ``workflow_id`` does not exist (Postgres).
    """
    await enlist_message(workflow_id, message, topic, key, ctx.client)
