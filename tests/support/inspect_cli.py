"""Running the helix-dbos command line in-process, as the inspect tests do."""

from __future__ import annotations

import asyncio
import contextlib
import io

from helix_dbos.cli import main


async def cli(*argv: str) -> tuple[int, str, str]:
    """``helix-dbos`` in this process (off the event loop): exit code, stdout, stderr.

    Captured here, not with ``capsys``: DBOS keeps the stderr it first saw for its own log
    handler, and a ``capsys`` stream is closed after its test.
    """
    out, err = io.StringIO(), io.StringIO()

    def run() -> int:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            return main(list(argv))

    code = await asyncio.to_thread(run)
    return code, out.getvalue(), err.getvalue()
