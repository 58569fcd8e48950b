"""The durable contract's version: what a parked turn needs to replay, named for DBOS.

The contract itself is ``runtime/names.py`` (the names DBOS persists) and
``runtime/records.py`` (the shapes of what it records); its version lives here, in the pure
core, so that building ``HelixSettings`` (whose application version defaults to it) loads
neither DBOS nor the runtime. ``runtime/names.py`` re-exports both names.
"""

from __future__ import annotations

__all__ = ["CONTRACT_VERSION", "REPLAYABLE_VERSIONS"]

CONTRACT_VERSION = "contract-3"
"""The version of this contract: the DBOS application version of every turn (by default).

A process recovers and dequeues only workflows of its own version, so this names what a parked
turn needs to replay: the workflow and step names below and the order the turn calls them in.
It is neither the package version nor a hash of the source: users' agent and tool code, and
releases that leave the contract alone, keep it. Bump it (``contract-2``...) only when a
recorded turn could no longer replay, and say in CHANGELOG.md how parked turns move forward.
"""
REPLAYABLE_VERSIONS = frozenset({"0.1.0", "contract-1", "contract-2"})
"""Application versions of earlier releases whose recorded turns this contract replays
unchanged; their parked turns are moved forward to ``CONTRACT_VERSION`` once no process of
theirs is alive. (0.1.0 pinned the package version over contract-1; a contract-1 turn replays
in layout 1 and a contract-2 turn in layout 2, see ``TURN_LAYOUT``.)"""
