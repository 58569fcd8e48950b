"""A migrated store for the store tests."""

from __future__ import annotations

import asyncio

from helix_dbos.store.migrate import upgrade
from helix_dbos.store.store import SessionStore


async def _store(db_url: str) -> SessionStore:
    await asyncio.to_thread(upgrade, db_url)
    return SessionStore.from_url(db_url)
