"""Which database failures are transient: worth waiting out and retrying, never fatal.

A transient fault says nothing about the request or the data: the database was unreachable
(connection refused, reset, closed, an administrator or crash shutdown, a server still starting
up), or it refused a transaction only because of a concurrent one (a serialization failure, a
deadlock). The same work, done again once the database answers, succeeds. Everything else (a
constraint violated, a database or role that does not exist, a wrong password, a syntax error,
a cancelled statement) is not transient: retrying it would only repeat it.

``StoreUnavailableError`` (what a bounded retry raises when the database stays away) is
transient too. ``is_transient`` looks through SQLAlchemy's ``DBAPIError`` wrappers (their driver error in
``.orig``, and ``connection_invalidated``) and through exception causes and contexts, so it
classifies what a store method, a DBOS step or an HTTP handler actually catches. It covers
psycopg 3 (Postgres) and the standard library's ``sqlite3`` (which aiosqlite re-raises).
"""

from __future__ import annotations

import sqlite3

import psycopg
import sqlalchemy as sa

from ..errors import StoreUnavailableError

__all__ = ["DATABASE_ERRORS", "TRANSIENT_SQLSTATES", "is_transient"]

#: The base classes of every database failure: SQLAlchemy's, psycopg's (the driver raises its
#: own where it runs without SQLAlchemy) and sqlite3's (which aiosqlite re-raises).
DATABASE_ERRORS: tuple[type[Exception], ...] = (
    sa.exc.SQLAlchemyError,
    psycopg.Error,
    sqlite3.Error,
)

#: SQLSTATEs of transient faults (besides the whole ``08`` connection-exception class).
TRANSIENT_SQLSTATES: frozenset[str] = frozenset(
    {
        "40001",  # serialization_failure: a concurrent transaction won; rerun it
        "40P01",  # deadlock_detected: this transaction was chosen as the victim
        "25P03",  # idle_in_transaction_session_timeout: the session was ended, nothing kept
        "53300",  # too_many_connections
        "57P01",  # admin_shutdown: the server is stopping, or the backend was terminated
        "57P02",  # crash_shutdown: another backend crashed and the server is restarting
        "57P03",  # cannot_connect_now: the server is starting up or in recovery
        "57P05",  # idle_session_timeout
    }
)

# Server messages of a failed connection attempt (psycopg reports them without a SQLSTATE)
# that mean "the server is there but cannot take us yet", as opposed to a wrong database,
# role or password, which a retry would only repeat.
_TRANSIENT_CONNECT_FATALS = (
    "the database system is starting up",
    "the database system is shutting down",
    "the database system is in recovery mode",
    "the database system is not yet accepting connections",
    "the database system is not accepting connections",
    "sorry, too many clients already",
    "remaining connection slots are reserved",
    "terminating connection due to administrator command",
)

# SQLite's "busy" (5) and "locked" (6) primary result codes; extended codes keep them in the
# low byte.
_SQLITE_BUSY_CODES = frozenset({5, 6})
_SQLITE_BUSY_MESSAGES = ("database is locked", "database table is locked", "database is busy")

# How many causes deep to look; chains are short, a loop guard is all this is.
_MAX_DEPTH = 8


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is (or was caused by) a transient database fault.

    Args:
        exc: any exception: a driver error, a SQLAlchemy wrapper, or an error raised from one.

    Returns:
        True for an unreachable or restarting database, a dropped connection, a serialization
        failure, a deadlock or SQLite lock contention; False for everything else.
    """
    seen: set[int] = set()
    pending: list[tuple[BaseException, int]] = [(exc, 0)]
    while pending:
        current, depth = pending.pop()
        if id(current) in seen or depth > _MAX_DEPTH:
            continue
        seen.add(id(current))
        verdict = _classify(current)
        if verdict is not None:
            return verdict
        if isinstance(current, BaseExceptionGroup):
            # A group is transient when every failure in it is.
            return bool(current.exceptions) and all(
                is_transient(inner) for inner in current.exceptions
            )
        linked = [
            e
            for e in (
                getattr(current, "orig", None),
                current.__cause__,
                None if current.__suppress_context__ else current.__context__,
            )
            if isinstance(e, BaseException)
        ]
        pending.extend((e, depth + 1) for e in linked)
    return False


def _classify(exc: BaseException) -> bool | None:
    """True or False when ``exc`` itself decides it; None to look at its causes."""
    if isinstance(exc, StoreUnavailableError):
        return True  # a retry loop below already gave up waiting: still transient
    if isinstance(exc, sa.exc.DBAPIError):
        if exc.connection_invalidated:
            # SQLAlchemy saw the connection die under the statement: transient whatever
            # the driver's error says.
            return True
        return None  # decide on .orig
    if isinstance(exc, sa.exc.TimeoutError):
        return True  # the pool had no connection to give within its timeout
    if isinstance(exc, psycopg.Error):
        return _psycopg_transient(exc)
    if isinstance(exc, sqlite3.OperationalError):
        return _sqlite_busy(exc)
    if isinstance(exc, ConnectionError):
        return True  # refused, reset, aborted, broken pipe below the driver
    return None


def _psycopg_transient(exc: psycopg.Error) -> bool:
    state = exc.sqlstate
    if state:
        return state.startswith("08") or state in TRANSIENT_SQLSTATES
    if not isinstance(exc, psycopg.OperationalError):
        return False  # InterfaceError, ProgrammingError without a state: our bug, not the DB
    # No SQLSTATE: the connection could not be made or was lost (refused, reset, closed,
    # timed out). A server that answered with FATAL is transient only while it is starting,
    # stopping or full; a missing database or role, or bad credentials, is not.
    text = str(exc)
    if "FATAL:" in text:
        lowered = text.lower()
        return any(fatal in lowered for fatal in _TRANSIENT_CONNECT_FATALS)
    return True


def _sqlite_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int) and (code & 0xFF) in _SQLITE_BUSY_CODES:
        return True
    text = str(exc).lower()
    return any(message in text for message in _SQLITE_BUSY_MESSAGES)
