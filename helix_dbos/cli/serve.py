"""``helix-dbos serve``: the agent server over HTTP, in one process or ``--workers N``."""

from __future__ import annotations

import argparse
import json
import os
from typing import TYPE_CHECKING, Any

from .command import EXIT_OK, Command, CommandError
from .migrate import database_errors, database_url

if TYPE_CHECKING:
    import socket

    from ..config import HelixSettings

__all__ = ["SERVE", "worker_app"]

#: Passes serve's options to the worker processes of ``serve --workers N`` (JSON).
_WORKER_OPTIONS_ENV = "HELIX_SERVE_WORKER_OPTIONS"


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "app",
        nargs="?",
        metavar="APP",
        help="module:attribute naming an Agent, a list of agents or an AgentRegistry, "
        "imported from the working directory (default: the demo agents, on the model "
        "HELIX_LLM names)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    parser.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="serve without authentication when HELIX_AUTH_SECRET is not set "
        "(only behind a proxy that authenticates)",
    )
    parser.add_argument(
        "--chat-agent",
        metavar="NAME",
        help="the agent POST /chat runs (default: the first agent served)",
    )
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="one line per log record: text (default) or JSON lines",
    )
    parser.add_argument(
        "--verbose-validation-errors",
        action="store_true",
        help="add validation details to 400 answers (they reveal the schemas: development)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="run N server processes on the port, each its own executor (default: 1)",
    )


def worker_app() -> Any:
    """The app of one ``serve --workers N`` process (uvicorn imports and calls it)."""
    from ..http.app import create_app
    from ..loader import load_agents
    from ..observability.logging_config import configure_logging

    options = json.loads(os.environ.get(_WORKER_OPTIONS_ENV) or "{}")
    configure_logging(options.get("logFormat", "text"))
    return create_app(
        agents=load_agents(options["app"]) if options.get("app") else None,
        allow_unauthenticated=bool(options.get("allowUnauthenticated")),
        verbose_validation_errors=bool(options.get("verboseValidationErrors")),
        chat_agent_type=options.get("chatAgent"),
    )


def _run(args: argparse.Namespace) -> int:
    # Imported here: the web stack and DBOS are not needed for `helix-dbos --help`.
    from ..config import HelixSettings
    from ..errors import HelixError
    from ..http.app import AUTH_SECRET_ENV
    from ..http.listener import bind_listener
    from ..loader import load_agents
    from ..observability.logging_config import configure_logging

    if not os.environ.get(AUTH_SECRET_ENV) and not args.allow_unauthenticated:
        raise CommandError(
            f"set {AUTH_SECRET_ENV} (a random secret of 32+ bytes) to require session "
            "tokens, or pass --allow-unauthenticated behind an authenticating proxy"
        )
    if args.workers < 1:
        raise CommandError("--workers must be at least 1")
    if args.workers > 1 and os.environ.get("HELIX_EXECUTOR_ID"):
        raise CommandError(
            "HELIX_EXECUTOR_ID names one process; with --workers each worker generates "
            "its own executor id (unset it)"
        )
    try:
        configure_logging(args.log_format)
        # The database rule of every command (cli/database.py): HELIX_DATABASE_URL, else
        # helix.sqlite, else the demo's demo.sqlite where only it exists (said on stderr).
        settings = HelixSettings.from_env(database_url=database_url(None, "serve"))
        agents = load_agents(args.app) if args.app else None
        # The port before the database: a port in use is one line (exit 2) here, before any
        # migration or launch, not uvicorn's exit 3 after the runtime has started.
        listener = bind_listener(args.host, args.port)
    except HelixError as exc:
        raise CommandError(exc.message) from None
    try:
        return _serve_on(listener, args, settings, agents)
    finally:
        listener.close()


def _serve_on(
    listener: socket.socket, args: argparse.Namespace, settings: HelixSettings, agents: Any
) -> int:
    """Check the database, then serve on ``listener`` (the socket ``serve`` bound)."""
    import uvicorn

    from ..config import redact_url
    from ..http.app import create_app
    from ..http.listener import ListeningServer
    from ..store import migrate

    # Check the database before the server starts, so a wrong URL, a missing database or
    # tables behind the code are one line here, not a traceback from the app's startup.
    with database_errors(redact_url(settings.database_url)):
        if settings.run_migrations:
            migrate.upgrade(settings.database_url)
        else:
            migrate.require_current_schema(settings.database_url)
        if args.workers > 1:
            # Each worker process builds its own app (and runtime, and executor id) from the
            # same options and database, passed down in the environment.
            os.environ.setdefault("HELIX_DATABASE_URL", settings.database_url)
            os.environ[_WORKER_OPTIONS_ENV] = json.dumps(
                {
                    "app": args.app,
                    "allowUnauthenticated": args.allow_unauthenticated,
                    "verboseValidationErrors": args.verbose_validation_errors,
                    "chatAgent": args.chat_agent,
                    "logFormat": args.log_format,
                }
            )
            # uvicorn binds the port itself for its workers: the check above was a probe.
            listener.close()
            uvicorn.run(
                "helix_dbos.cli.serve:worker_app",
                factory=True,
                host=args.host,
                port=args.port,
                workers=args.workers,
                timeout_graceful_shutdown=10,
                log_config=None,
            )
            return EXIT_OK
        app = create_app(
            agents=agents,
            settings=settings,
            allow_unauthenticated=args.allow_unauthenticated,
            verbose_validation_errors=args.verbose_validation_errors,
            chat_agent_type=args.chat_agent,
        )
    # An open event stream of a running turn would hold a graceful shutdown forever; after
    # the grace period it is closed (its client resumes with Last-Event-ID elsewhere).
    # log_config=None: the logging configured above stays as it is.
    config = uvicorn.Config(
        app, host=args.host, port=args.port, timeout_graceful_shutdown=10, log_config=None
    )
    server = ListeningServer(config)
    try:
        server.run(sockets=[listener])
    except SystemExit as exc:
        # uvicorn exits 3 when the app's startup (the runtime's launch) failed: a startup
        # failure is exit 2, its cause is in the log above.
        if server.started or exc.code in (0, None):
            raise
    if not server.started:
        raise CommandError("the server did not start (see the log above)")
    return EXIT_OK


SERVE = Command(
    name="serve",
    help="run the agent server over HTTP: your agents (APP) or the demo agents",
    configure=_configure,
    run=_run,
)
