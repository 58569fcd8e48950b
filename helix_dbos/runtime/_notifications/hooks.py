"""Notification hooks: an app is told when a call parks, nears its deadline, expires or is
resolved, at least once, even across a crash.

Register hooks on the runtime (``AgentRuntime`` mixes in ``NotificationHooks``)::

    @runtime.on_pending
    async def tell_approvers(note: Notification) -> None:
        await mailer.send(note.key, f"{note.tool_name} waits for you")

Each event is a row of the outbox (``store/outbox.py``), written by the commit that caused it
(``_notifications/outbox_rows.py``); the runtime's dispatcher (``_notifications/dispatcher.py``) calls the hooks and retries a hook
that raises, with backoff, until it returns. A hook may therefore be called more than once for
one event (a crash after the hook ran, before the delivery was recorded): ``Notification.key``
is the same every time, for the hook to drop a repeat. A hook never fails a turn: it runs apart
from the turns, after their commits.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, fields, replace
from typing import Any, Protocol, TypeVar

from ...errors import RequestValidationError
from .outbox_rows import KINDS, NotificationKind

__all__ = [
    "DeliveryOptions",
    "Hook",
    "Notification",
    "NotificationHooks",
    "Notifications",
]


@dataclass(frozen=True)
class Notification:
    """One event of a parked call, as a hook receives it."""

    kind: NotificationKind
    """``pending`` (the call parked), ``deadline_near`` (its tool's ``remind_before`` before
    the deadline), ``expired`` (the deadline lapsed; ``on_timeout`` says what the model got),
    ``resolved`` (it stopped waiting otherwise; ``outcome`` says how) or ``escalated`` (an
    approval's policy let a further group answer it: ``data`` has ``escalateTo``)."""
    key: str
    """The event's idempotency key, ``<kind>:<runId>::<toolCallId>``: the same on every
    delivery of this event, different for every other event."""
    session_id: str
    """The session that made the call (a sub-agent's, for a sub-agent's call)."""
    root_session_id: str
    """Where an answer is submitted."""
    run_id: str
    tool_call_id: str
    tool_name: str
    call_kind: str
    """``approval`` or ``client``."""
    deadline_at: int
    """The call's deadline (epoch ms)."""
    at: int
    """When the event happened (epoch ms)."""
    attempt: int
    """1 on the first delivery, then 2, 3... (a retry after a hook raised or a crash)."""
    approval_id: str | None = None
    """For an approval: the ``approvalId`` an answer needs."""
    outcome: str | None = None
    """``expired``, or for ``resolved``: ``answered``, ``denied``, ``abandoned`` or
    ``stopped``."""
    on_timeout: str | None = None
    """``expired`` only: the tool's policy applied (``error``, ``deny``, ``approve``,
    ``result``)."""
    input: dict[str, Any] | None = None
    """``pending`` only: the call's arguments (what an approver approves)."""
    decider: dict[str, Any] | None = None
    """``resolved`` of an approval: who decided (``principal``, ``tenant``, ``credential``,
    ``roles``), as the credential established it; a quorum's ``approvers`` are in ``data``."""
    data: dict[str, Any] = field(default_factory=dict)
    """Everything the event recorded (camelCase), including the fields above."""


Hook = Callable[[Notification], Awaitable[None] | None]
"""A notification hook: sync or async; what it returns is ignored, an exception is a failed
delivery (retried). A sync hook runs on the event loop: keep blocking work out of it."""

H = TypeVar("H", bound=Hook)

#: The options that count things (the others are seconds).
_COUNTS = frozenset({"max_attempts", "batch_size"})


@dataclass(frozen=True)
class DeliveryOptions:
    """How the dispatcher delivers (``AgentRuntime.configure_notifications``)."""

    poll_seconds: float = 1.0
    """How often it looks for due events (events of this process's commits wake it at once)."""
    retry_base_seconds: float = 1.0
    """The pause after a hook's first failure; it doubles at each further failure..."""
    retry_max_seconds: float = 300.0
    """...up to this."""
    max_attempts: int = 20
    """Deliveries tried before the event is given up (``notification.gave_up``)."""
    hook_timeout_seconds: float = 30.0
    """A hook still running after this has failed (and is retried)."""
    lease_seconds: float | None = None
    """How long a claimed event is kept from other dispatchers while its hooks run; a crash
    mid-delivery delivers it again after this. Default: ``hook_timeout_seconds`` + 30."""
    retention_seconds: float = 7 * 24 * 3600.0
    """Settled events are deleted after this."""
    batch_size: int = 32
    """Events claimed (and delivered concurrently) at once."""

    @property
    def lease(self) -> float:
        """The claim's lease in seconds."""
        return (
            self.lease_seconds if self.lease_seconds is not None else self.hook_timeout_seconds + 30
        )


class _Delivery(Protocol):
    """What the hooks drive of their dispatcher (``dispatcher.Dispatcher``, built on them)."""

    def start(self) -> None: ...

    def wake(self) -> None: ...

    async def stop(self) -> None: ...


class Notifications:
    """A runtime's hooks by kind, its delivery options, and its dispatcher while launched."""

    def __init__(self) -> None:
        self._hooks: dict[str, list[Hook]] = {kind: [] for kind in KINDS}
        self.options = DeliveryOptions()
        self._dispatcher: _Delivery | None = None
        self._reminders = False

    @property
    def kinds(self) -> frozenset[str]:
        """The kinds that have at least one hook (the commits write only those)."""
        return frozenset(kind for kind, hooks in self._hooks.items() if hooks)

    def hooks_for(self, kind: str) -> list[Hook]:
        """The hooks of ``kind``, in the order they were added."""
        return list(self._hooks.get(kind, ()))

    def add(self, hook: H, kinds: Iterable[str] | None = None) -> H:
        """Add ``hook`` for ``kinds`` (every kind when ``None``); returns it.

        Raises:
            RequestValidationError: an unknown kind, or a hook that is not callable.
        """
        if not callable(hook):
            raise RequestValidationError("A notification hook must be callable", cause="hook")
        wanted = list(KINDS if kinds is None else kinds)
        unknown = [k for k in wanted if k not in self._hooks]
        if unknown or not wanted:
            raise RequestValidationError(
                f"Unknown notification kinds {unknown}: use {list(KINDS)}", cause="kinds"
            )
        for kind in dict.fromkeys(wanted):
            self._hooks[kind].append(hook)
        self._ensure_running()
        return hook

    def configure(self, **options: Any) -> DeliveryOptions:
        """Change delivery options (``DeliveryOptions``' fields); returns them all.

        Raises:
            RequestValidationError: an unknown option, or a value that is not a positive number.
        """
        known = {f.name for f in fields(DeliveryOptions)}
        for name, value in options.items():
            if name not in known:
                raise RequestValidationError(f"Unknown delivery option {name!r}", cause=name)
            if value is None and name == "lease_seconds":
                continue
            kind = int if name in _COUNTS else int | float
            if isinstance(value, bool) or not isinstance(value, kind) or not value > 0:
                what = "a whole number" if name in _COUNTS else "a number"
                raise RequestValidationError(f"{name} must be {what} > 0", cause=name)
        self.options = replace(self.options, **options)
        return self.options

    def wake(self) -> None:
        """Look for due events now (a commit of this process wrote some)."""
        if self._dispatcher is not None:
            self._dispatcher.wake()

    # -- the dispatcher's life ----------------------------------------------------------------

    def start(self, dispatcher: _Delivery, *, reminders: bool) -> None:
        """At launch: run ``dispatcher`` (built on this object) if there are hooks, or tools
        with reminders."""
        self._reminders = reminders
        self._dispatcher = dispatcher
        self._ensure_running()

    def _ensure_running(self) -> None:
        if self._dispatcher is not None and (self._reminders or self.kinds):
            self._dispatcher.start()

    async def stop(self) -> None:
        """At shutdown: stop the dispatcher (an event being delivered is delivered again by
        the next dispatcher, once its lease ends)."""
        dispatcher, self._dispatcher = self._dispatcher, None
        if dispatcher is not None:
            await dispatcher.stop()


class NotificationHooks:
    """The runtime's methods to register hooks (mixed into ``AgentRuntime``).

    Register them before ``launch`` (or at any time after: they apply to events committed
    from then on). Register the same hooks in every process of a fleet: a process writes
    only the events it has hooks for, and any process may deliver them.
    """

    notifications: Notifications

    def on_pending(self, hook: H) -> H:
        """Call ``hook`` when a call parks (a client call or an approval); a decorator."""
        return self.notifications.add(hook, ["pending"])

    def on_deadline_near(self, hook: H) -> H:
        """Call ``hook`` ``remind_before`` seconds before a call's deadline (tools that
        define ``remind_before``), when it is still unanswered; a decorator."""
        return self.notifications.add(hook, ["deadline_near"])

    def on_expired(self, hook: H) -> H:
        """Call ``hook`` when a call's deadline lapsed without an answer; a decorator."""
        return self.notifications.add(hook, ["expired"])

    def on_resolved(self, hook: H) -> H:
        """Call ``hook`` when a call stops waiting otherwise: answered (its answer stored),
        denied, abandoned by a new message, or stopped; a decorator."""
        return self.notifications.add(hook, ["resolved"])

    def on_escalated(self, hook: H) -> H:
        """Call ``hook`` when an approval's policy escalates it (its ``escalate_after``
        passed, unanswered: ``escalate_to``'s roles may answer now); a decorator."""
        return self.notifications.add(hook, ["escalated"])

    def on_notification(self, hook: H, kinds: Iterable[str] | None = None) -> H:
        """Call ``hook`` for every event of ``kinds`` (default: all five), ``note.kind``
        telling them apart."""
        return self.notifications.add(hook, kinds)

    def configure_notifications(self, **options: Any) -> DeliveryOptions:
        """Change how hooks are delivered (``DeliveryOptions``: ``poll_seconds``,
        ``retry_base_seconds``, ``retry_max_seconds``, ``max_attempts``,
        ``hook_timeout_seconds``, ``lease_seconds``, ``retention_seconds``, ``batch_size``)."""
        return self.notifications.configure(**options)
