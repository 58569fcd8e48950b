"""Who owns a session: the principal and the tenant it was started under.

Both are text on the session row (``principal``, ``tenant``). The Python API takes them as
strings; an authenticate hook may answer any JSON value as its principal, so the HTTP layer
records a non-string one as its canonical JSON (``owner_text``), the same text every time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..errors import RequestValidationError

__all__ = ["OWNER_MAX_LENGTH", "SessionOwner", "checked_owner", "owner_text"]

#: The longest principal or tenant a session records.
OWNER_MAX_LENGTH = 512


@dataclass(frozen=True)
class SessionOwner:
    """Who a session was started by: the principal and the tenant (either may be unset)."""

    principal: str | None = None
    tenant: str | None = None


def owner_text(value: Any) -> str | None:
    """A principal or tenant as the session records it: a string as is, ``None`` as unset,
    anything else as its canonical JSON (sorted keys, no spaces)."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def checked_owner(value: Any, name: str) -> str | None:
    """``value`` if it is unset or a string of 1 to ``OWNER_MAX_LENGTH`` characters, none of
    them a NUL (Postgres cannot store one in a text column: the write would fail untyped).

    Raises:
        RequestValidationError: ``cause`` is ``name``.
    """
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= OWNER_MAX_LENGTH:
        raise RequestValidationError(
            f"{name} must be a string of 1 to {OWNER_MAX_LENGTH} characters", cause=name
        )
    if "\x00" in value:
        raise RequestValidationError(f"{name} must not contain a NUL character", cause=name)
    return value
