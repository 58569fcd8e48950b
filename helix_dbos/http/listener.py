"""The listening socket of ``helix-dbos serve``, bound before anything else starts.

A port already in use must be one line and exit code 2 before the runtime touches the
database, not uvicorn's exit code 3 after a full launch. So ``serve`` binds the socket first
(``bind_listener``) and hands it to uvicorn (``ListeningServer``), which then serves on it.
"""

from __future__ import annotations

import errno
import logging
import socket

import uvicorn

from ..errors import ConfigError

__all__ = ["ListeningServer", "PortInUseError", "bind_listener"]


class PortInUseError(ConfigError):
    """Another process listens on the port (``serve`` exits 2 with this line)."""


def bind_listener(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` as uvicorn binds it (``SO_REUSEADDR``, IPv6 when
    ``host`` has a colon), not yet listening: connections are refused until the app is ready.

    Raises:
        PortInUseError: the port is taken.
        ConfigError: any other bind failure (an address this machine does not have, a
            privileged port).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise PortInUseError(
                f"port {port} is already in use on {host}: stop what listens there, or pick "
                "another port with --port N (for the demo: PORT=N bash scripts/demo)"
            ) from None
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)  # the worker processes of --workers share it
    return sock


class ListeningServer(uvicorn.Server):
    """A uvicorn server on a socket bound beforehand, announcing its URL as uvicorn does when
    it binds the socket itself (``Uvicorn running on http://...``)."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started and sockets:
            host, port = sockets[0].getsockname()[:2]
            shown = f"[{host}]" if ":" in host else host
            logging.getLogger("uvicorn.error").info(
                "Uvicorn running on http://%s:%d (Press CTRL+C to quit)", shown, port
            )
