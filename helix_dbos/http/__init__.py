"""The agent server over HTTP: a router to embed in any FastAPI app, and a standalone app.

``create_router(runtime, authenticate=...)`` builds the routes; ``lifespan_for(runtime)``
launches the runtime with the app; ``create_app()`` is the standalone server. See
docs/http-api.md for the wire contract and docs/embedding.md for embedding.
"""

from .app import create_app, lifespan_for
from .auth import (
    AuthHook,
    AuthResult,
    SessionTokens,
    TokenIssuer,
    request_body,
    request_decider,
    request_is_approver,
    request_principal,
    request_session_id,
    request_tenant,
    session_token_auth,
)
from .chat import create_chat_router
from .errors import error_response, install_error_handlers
from .limits import DEFAULT_SUBMIT_RATE_LIMIT, SlidingWindowLimiter
from .metrics import create_metrics_router, metrics_app, metrics_token_auth
from .router import create_router

__all__ = [
    "DEFAULT_SUBMIT_RATE_LIMIT",
    "AuthHook",
    "AuthResult",
    "SessionTokens",
    "SlidingWindowLimiter",
    "TokenIssuer",
    "create_app",
    "create_chat_router",
    "create_metrics_router",
    "create_router",
    "error_response",
    "install_error_handlers",
    "lifespan_for",
    "metrics_app",
    "metrics_token_auth",
    "request_body",
    "request_decider",
    "request_is_approver",
    "request_principal",
    "request_session_id",
    "request_tenant",
    "session_token_auth",
]
