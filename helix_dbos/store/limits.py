"""The store's limit on a session row's size: its stored pending map, in JSON bytes."""

from __future__ import annotations

import json

from ..core.session import SessionState
from ..errors import StateSizeExceededError

__all__ = ["check_size"]


def check_size(state: SessionState, max_state_bytes: int | None) -> None:
    """Refuse ``state`` if its pending calls would take more than ``max_state_bytes``.

    Raises:
        StateSizeExceededError: over the limit (``None``: no limit).
    """
    if max_state_bytes is None:
        return
    size = len(json.dumps({k: v.dump() for k, v in state.pending.items()}).encode())
    if size > max_state_bytes:
        raise StateSizeExceededError(
            f"The session's stored pending calls would be {size} bytes, over the "
            f"store's limit of {max_state_bytes}",
            cause="state",
            limitBytes=max_state_bytes,
            sizeBytes=size,
        )
