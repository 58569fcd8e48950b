"""``helix-dbos approver-token``: issue approver tokens for the standalone server's
``HELIX_AUTH_SECRET`` (``SessionTokens.issue_approver``), one line per principal."""

from __future__ import annotations

import argparse
import os

from .command import EXIT_OK, Command, CommandError

__all__ = ["APPROVER_TOKEN"]


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--principal",
        metavar="NAME",
        action="append",
        required=True,
        help="who decides with the token (repeatable: one token per principal, one per line)",
    )
    parser.add_argument(
        "--role",
        metavar="ROLE",
        action="append",
        default=[],
        help="a role the token holds, for an approval policy's roles (repeatable)",
    )
    parser.add_argument(
        "--tenant",
        metavar="TENANT",
        help="the tenant whose approvals it answers (default: HELIX_TENANT)",
    )
    parser.add_argument(
        "--ttl",
        metavar="DURATION",
        default="8h",
        help="how long the token is valid (30d, 12h, 90m, 45s, or seconds; default 8h)",
    )


def _run(args: argparse.Namespace) -> int:
    from ..config import parse_duration
    from ..errors import HelixError
    from ..http.app import AUTH_SECRET_ENV, TENANT_ENV
    from ..http.auth import SessionTokens

    secret = os.environ.get(AUTH_SECRET_ENV)
    if not secret:
        raise CommandError(f"set {AUTH_SECRET_ENV}: the server's session-token secret")
    tenant = args.tenant or os.environ.get(TENANT_ENV)
    if not tenant:
        raise CommandError(f"name the tenant: --tenant, or {TENANT_ENV}")
    try:
        ttl = parse_duration(args.ttl)
    except ValueError as exc:
        raise CommandError(f"--ttl: {exc}") from None
    if ttl is None or ttl <= 0:
        raise CommandError("--ttl must be a positive duration")
    try:
        tokens = SessionTokens(secret, ttl)
        for principal in args.principal:
            print(tokens.issue_approver(tenant, principal, roles=args.role))
    except HelixError as exc:
        raise CommandError(exc.message) from None
    return EXIT_OK


APPROVER_TOKEN = Command(
    name="approver-token",
    help="issue approver tokens (HELIX_AUTH_SECRET) for a tenant: a principal and its roles",
    configure=_configure,
    run=_run,
)
