"""The authenticate hook, and a ready-made one: short-lived session-bound HMAC tokens.

The hook runs before every route's handler with the request and the operation name
(``start``, ``resume``, ``sse``, ``status``, ``interrupt``, ``abort``, ``submit-tool-result``,
the chat's ``chat-new``, ``chat``, ``chat-stream``, AG-UI's ``agui``, ``agui-tools``, and
``metrics`` for a scrape of ``GET /metrics``, which names no session, ``approvals`` for
the approval inbox, and ``mcp-tools`` for the agents listed at ``POST /mcp``, whose other
requests are the operations above: mcp_route.py). It returns ``True`` or ``{"ok": True, "principal": ..., "tenant": ...,
"approver": ...}`` (accept; ``request_principal(request)`` is the principal, and a new session
records principal and tenant; see ``scope.py`` for what a tenant and an approver may reach),
``False`` (a generic 401) or ``{"error": ..., "status": ...}`` (also with ``"ok": False``: a
custom refusal, e.g. 403). It may be sync or async. Anything else refuses (fail closed).

Before the hook runs, the router has read, parsed and validated the body:
``request_session_id(request)`` is the session the request acts on, derived from the validated
body, query or path (``pipeline.RouteContext``; the handler acts on that same value), and
``request_body(request)`` the parsed JSON, so a hook can bind a credential to a session.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import inspect
import json
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextvars import ContextVar
from typing import Any, NamedTuple

from starlette.requests import Request

from ..core.approval_policy import Decider
from ..core.owner import owner_text
from ..errors import AuthError, ConfigError
from ..observability.log import log_event

__all__ = [
    "APPROVER_OPERATIONS",
    "OPERATIONS",
    "ApproverClaims",
    "AuthHook",
    "AuthResult",
    "SessionTokens",
    "TokenIssuer",
    "request_body",
    "request_decider",
    "request_is_approver",
    "request_principal",
    "request_session_id",
    "request_tenant",
    "run_authenticate",
    "session_token_auth",
    "set_request_context",
]

#: The operation names the hook receives.
OPERATIONS = (
    "start",
    "resume",
    "sse",
    "status",
    "interrupt",
    "abort",
    "submit-tool-result",
    "chat-new",
    "chat",
    "chat-stream",
    "retry",
    "checkpoints",
    "agui",
    "agui-tools",
    "metrics",
    "approvals",
    "mcp-tools",
)
#: The operations that create a session: nothing exists yet to bind a token to.
NEW_SESSION_OPERATIONS = frozenset({"start", "chat-new"})
#: What an approver token may do: list the inbox, read a session, answer its calls.
APPROVER_OPERATIONS = frozenset({"approvals", "status", "sse", "submit-tool-result"})

AuthResult = bool | Mapping[str, Any]
"""``True``, ``{"ok": True, "principal"?, "tenant"?, "approver"?}``, ``False`` or
``{"error": str, "status": int}``."""
AuthHook = Callable[[Request, str], AuthResult | Awaitable[AuthResult]]
"""``authenticate(request, operation)``, sync or async."""
TokenIssuer = Callable[[str], str]
"""``issue(session_id) -> token``: called by ``/start`` for the session it returns."""

_SESSION_KEY = "helix_session_id"
_BODY_KEY = "helix_body"
_PRINCIPAL_KEY = "helix_principal"
_TENANT_KEY = "helix_tenant"
_APPROVER_KEY = "helix_approver"
_DECIDER_KEY = "helix_decider"
#: The decider of the request this task serves (the hook's answer), for the submit it makes.
_decider: ContextVar[Decider | None] = ContextVar("helix_request_decider", default=None)
#: A token's answers name their credential; any other accepting answer is the app's hook's.
_CREDENTIAL = "credential"
_TOKEN_CREDENTIALS = frozenset({"session_token", "approver_token"})


def request_session_id(request: Request) -> str | None:
    """The session the request acts on, as the router derived it from the validated request
    (``None``: it acts on none)."""
    value = getattr(request.state, _SESSION_KEY, None)
    return value if isinstance(value, str) else None


def request_body(request: Request) -> Any:
    """The request's parsed JSON body (``None`` for a GET or an unparsable body)."""
    return getattr(request.state, _BODY_KEY, None)


def request_principal(request: Request) -> Any:
    """The ``principal`` the hook accepted the request with (``None`` when it gave none)."""
    return getattr(request.state, _PRINCIPAL_KEY, None)


def request_tenant(request: Request) -> Any:
    """The ``tenant`` the hook accepted the request with (``None`` when it gave none)."""
    return getattr(request.state, _TENANT_KEY, None)


def request_is_approver(request: Request) -> bool:
    """Whether the hook accepted the request with ``"approver": True``."""
    return getattr(request.state, _APPROVER_KEY, False) is True


def request_decider(request: Request | None = None) -> Decider:
    """Who decides an approval this request answers, as the hook (or token) accepted it:
    principal and tenant as text, the credential's kind, the hook's ``roles``; never what
    the body says. Without ``request``: the request the running task serves."""
    found = getattr(request.state, _DECIDER_KEY, None) if request is not None else _decider.get()
    return found if isinstance(found, Decider) else Decider(credential="unauthenticated")


def _accepted_by(outcome: Mapping[str, Any] | None) -> Decider:
    if outcome is None:
        return Decider(credential="hook")
    credential = outcome.get(_CREDENTIAL)
    roles = outcome.get("roles")
    return Decider(
        principal=owner_text(outcome.get("principal")),
        tenant=owner_text(outcome.get("tenant")),
        credential=credential if credential in _TOKEN_CREDENTIALS else "hook",
        roles=tuple(r for r in roles if isinstance(r, str)) if isinstance(roles, list) else (),
    )


def _record_decider(request: Request, decider: Decider) -> None:
    setattr(request.state, _DECIDER_KEY, decider)
    _decider.set(decider)


def set_request_context(request: Request, session_id: str | None, body: Any) -> None:
    """Record what the hook may read (the router calls this before ``run_authenticate``)."""
    setattr(request.state, _SESSION_KEY, session_id)
    setattr(request.state, _BODY_KEY, body)
    _record_decider(request, Decider(credential="unauthenticated"))


async def run_authenticate(hook: AuthHook | None, request: Request, operation: str) -> None:
    """Run the hook; a refusal raises.

    Raises:
        AuthError: the hook returned ``False`` (401), ``{error, status}`` (that status, a 4xx;
            anything else is answered 401), or anything that is not ``True`` or
            ``{"ok": True, ...}``.
    """
    if hook is None:
        return
    outcome = hook(request, operation)
    if inspect.isawaitable(outcome):
        outcome = await outcome
    if outcome is True:
        _record_decider(request, _accepted_by(None))
        return
    if isinstance(outcome, Mapping) and outcome.get("ok") is True:
        setattr(request.state, _PRINCIPAL_KEY, outcome.get("principal"))
        setattr(request.state, _TENANT_KEY, outcome.get("tenant"))
        setattr(request.state, _APPROVER_KEY, outcome.get("approver") is True)
        _record_decider(request, _accepted_by(outcome))
        return
    if isinstance(outcome, Mapping):
        status = outcome.get("status", 401)
        if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status < 500:
            status = 401
        error = outcome.get("error")
        raise AuthError(
            error if isinstance(error, str) and error else "Unauthorized", status=status
        )
    # False, None or anything unexpected: refuse without saying why.
    raise AuthError("Unauthorized", status=401)


class ApproverClaims(NamedTuple):
    """What a valid approver token says: its tenant, its principal (``None``: it names none)
    and the roles it holds."""

    tenant: str
    principal: str | None
    roles: tuple[str, ...]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SessionTokens:
    """Short-lived HMAC-SHA256 tokens bound to one session.

    A token is ``base64url(payload) + "." + base64url(hmac(secret, payload))`` where the
    payload is ``{"sid": sessionId, "exp": epoch seconds}``. It proves the holder started (or
    was handed) that session; it authorizes nothing about any other session.

    Args:
        secret: the signing key, at least 32 bytes (a random value from a secret store).
        ttl_seconds: how long an issued token is valid.
        authorize_start: optional hook for a new session (``/start`` without a
            ``sessionId``, and ``POST /chat/sessions``), for example your user authentication. Without it anyone who can reach the server
            may start new sessions (they never reach an existing one).
        clock: seconds since the epoch (tests pass their own).

    Raises:
        ConfigError: the secret is too short, or the ttl is not positive.
    """

    def __init__(
        self,
        secret: str | bytes,
        ttl_seconds: float = 3600,
        *,
        authorize_start: AuthHook | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        key = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
        if len(key) < 32:
            raise ConfigError("The session-token secret must be at least 32 bytes")
        if not ttl_seconds > 0:
            raise ConfigError("ttl_seconds must be > 0")
        self._key = key
        self.ttl_seconds = float(ttl_seconds)
        self._authorize_start = authorize_start
        self._clock = clock

    def _sign(self, payload: str) -> str:
        return _b64(hmac.new(self._key, payload.encode("ascii"), hashlib.sha256).digest())

    def issue(self, session_id: str, *, expires_at: float | None = None) -> str:
        """A token for ``session_id``, valid for ``ttl_seconds`` (or until ``expires_at``)."""
        exp = int(expires_at if expires_at is not None else self._clock() + self.ttl_seconds)
        payload = _b64(json.dumps({"sid": session_id, "exp": exp}, separators=(",", ":")).encode())
        return f"{payload}.{self._sign(payload)}"

    def issue_approver(
        self,
        tenant: str,
        principal: str | None = None,
        *,
        roles: Iterable[str] = (),
        expires_at: float | None = None,
    ) -> str:
        """A token for an approver of ``tenant``: it lists that tenant's approvals, reads its
        sessions' status and events and answers their calls (``APPROVER_OPERATIONS``), and
        nothing else; valid for ``ttl_seconds`` (or until ``expires_at``). ``principal`` is
        who decides with it (a quorum and four eyes need one), ``roles`` the roles it holds
        (an approval policy's ``roles`` and ``escalate_to``), both recorded with each
        decision it makes.

        Raises:
            ConfigError: ``tenant`` is not a non-empty string, ``principal`` is not one (or
                ``None``), or ``roles`` is not a collection of non-empty strings.
        """
        if not isinstance(tenant, str) or not tenant:
            raise ConfigError("An approver token needs a tenant (a non-empty string)")
        if principal is not None and (not isinstance(principal, str) or not principal):
            raise ConfigError("An approver token's principal is a non-empty string, or None")
        held = [roles] if isinstance(roles, str) else list(roles)
        if isinstance(roles, str) or not all(isinstance(r, str) and r for r in held):
            raise ConfigError("An approver token's roles are a collection of non-empty strings")
        exp = int(expires_at if expires_at is not None else self._clock() + self.ttl_seconds)
        claims: dict[str, Any] = {"role": "approver", "tenant": tenant, "exp": exp}
        if principal:
            claims["sub"] = principal
        if held:
            claims["roles"] = sorted(set(held))
        payload = _b64(json.dumps(claims, separators=(",", ":")).encode())
        return f"{payload}.{self._sign(payload)}"

    def verify_approver(self, token: str) -> ApproverClaims | None:
        """The tenant, principal and roles of a valid, unexpired approver token; ``None``
        otherwise."""
        claims = self._claims(token)
        if claims is None or claims.get("role") != "approver":
            return None
        tenant, sub, roles = claims.get("tenant"), claims.get("sub"), claims.get("roles")
        if not isinstance(tenant, str) or not tenant:
            return None
        held = tuple(r for r in roles if isinstance(r, str)) if isinstance(roles, list) else ()
        return ApproverClaims(tenant, sub if isinstance(sub, str) else None, held)

    def verify(self, token: str) -> str | None:
        """The session a valid, unexpired session token is bound to; ``None`` for anything
        else (an approver token included)."""
        claims = self._claims(token)
        if claims is None or "role" in claims:
            return None
        sid = claims.get("sid")
        return sid if isinstance(sid, str) else None

    def _claims(self, token: str) -> dict[str, Any] | None:
        """The claims of a token this secret signed that has not expired; else ``None``."""
        payload, sep, signature = token.partition(".")
        # compare_digest refuses non-ASCII text (a header decodes as latin-1): check first.
        if not sep or not payload or not signature or not token.isascii():
            return None
        # Constant-time comparison: the check leaks nothing about the right signature.
        if not hmac.compare_digest(self._sign(payload), signature):
            return None
        try:
            claims = json.loads(_unb64(payload))
        except ValueError:
            return None
        if not isinstance(claims, dict):
            return None
        exp = claims.get("exp")
        if not isinstance(exp, int) or exp <= self._clock():
            return None
        return claims

    @staticmethod
    def token_of(request: Request) -> str | None:
        """The bearer token: ``Authorization: Bearer <token>``, or ``?token=`` on a GET
        (a browser's EventSource cannot set headers)."""
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
        if request.method == "GET":
            return request.query_params.get("token") or None
        return None

    async def authenticate(self, request: Request, operation: str) -> AuthResult:
        """The hook: a valid token for the session the request names, else 401 / 403."""
        session_id = request_session_id(request)
        token = self.token_of(request)
        approver = self.verify_approver(token) if token is not None else None
        if approver is not None:
            return _approver_answer(operation, approver)
        if operation == "metrics":
            # A scrape names no session: a session's token says nothing about operators.
            return {"error": "Session tokens do not scrape /metrics", "status": 403}
        new_session = operation in NEW_SESSION_OPERATIONS and session_id is None
        if new_session and token is None:
            # A brand-new session: nothing to bind yet.
            return await self._start_answer(request, operation)
        if token is None:
            return {"error": "A session token is required", "status": 401}
        bound = self.verify(token)
        if bound is None:
            return {"error": "The session token is invalid or expired", "status": 401}
        if new_session:
            # A token holder starting a new session is treated like anyone else.
            return await self._start_answer(request, operation)
        return _bound_answer(operation, session_id, bound)

    async def _start_answer(self, request: Request, operation: str) -> AuthResult:
        """The answer to a request that starts a new session: the ``authorize_start`` hook's,
        else allowed."""
        if self._authorize_start is None:
            return True
        outcome = self._authorize_start(request, operation)
        return await outcome if inspect.isawaitable(outcome) else outcome


def _bound_answer(operation: str, session_id: str | None, bound: str) -> AuthResult:
    """The answer to a valid token bound to the session ``bound`` for a request that names
    ``session_id``: allowed for that session, 403 for another one."""
    if operation == "approvals" and session_id != bound:
        # The inbox of one session only: a session token says nothing about the others.
        return {"error": "A session token lists only its session's approvals", "status": 403}
    if session_id is not None and session_id != bound:
        return {"error": "The session token is for another session", "status": 403}
    # session_id None: the request acts on no session (a route that names none), or its body
    # is invalid and validation refuses it next; a valid body always names its session.
    return {"ok": True, _CREDENTIAL: "session_token"}


def _approver_answer(operation: str, approver: ApproverClaims) -> AuthResult:
    """The hook's answer to an approver token: its tenant, as an approver (the router then
    refuses the sessions of other tenants), with its principal and roles, for the operations
    an approver may do."""
    if operation not in APPROVER_OPERATIONS:
        return {"error": "An approver token only lists, reads and answers approvals", "status": 403}
    return {
        "ok": True,
        "principal": approver.principal,
        "tenant": approver.tenant,
        "roles": list(approver.roles),
        "approver": True,
        _CREDENTIAL: "approver_token",
    }


def session_token_auth(
    secret: str | bytes,
    ttl_seconds: float = 3600,
    *,
    authorize_start: AuthHook | None = None,
) -> tuple[AuthHook, TokenIssuer]:
    """A ready-made ``(authenticate, issue)`` pair for ``create_router``.

    ``/start`` answers a token bound to its session; every later call for that session sends
    it (``Authorization: Bearer``). A call for another session is 403; a missing, invalid or
    expired token is 401. See ``SessionTokens`` for the arguments.
    """
    tokens = SessionTokens(secret, ttl_seconds, authorize_start=authorize_start)
    return tokens.authenticate, tokens.issue


def refuse_unless_authenticated(
    authenticate: AuthHook | None,
    allow_unauthenticated: bool,
    service_name: str | None,
    what: str,
    things: str,
) -> None:
    """Fail closed: refuse to build routes with no ``authenticate`` hook unless the caller
    opted out explicitly; an opt-out logs a WARN (with ``service``) and prints to stderr, so a
    misconfigured deployment is visible even without a configured logger.

    Raises:
        ConfigError: neither ``authenticate`` nor ``allow_unauthenticated=True``.
    """
    if authenticate is not None:
        return
    if not allow_unauthenticated:
        raise ConfigError(
            f"The {what} needs authentication: pass authenticate= (for example "
            "session_token_auth(secret)) or allow_unauthenticated=True behind an "
            "authenticating proxy"
        )
    log_event(
        "server.unauthenticated",
        service=service_name,
        message=f"The {what} runs WITHOUT authentication",
    )
    label = f" {service_name!r}" if service_name else ""
    print(
        f"WARNING: the helix-dbos {what}{label} runs WITHOUT authentication: anyone who can "
        f"reach it can start {things} and submit tool results.",
        file=sys.stderr,
    )
