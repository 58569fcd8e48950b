"""Hibernated turns: the continuation workflow that carries a hibernated turn on from what
its row records (``continuation``), and the keeper that continues hibernated batches when
their deadline is due, with no request (``keeper``).

May import: ``_turn`` and the rooms below it. A persistent session's inbox and the parent's
wake-up are found in ``_context.rooms``.
"""
