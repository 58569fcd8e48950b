"""The session store: the ``__agents_*`` tables, their migrations, and every read and write.

Internal: applications reach it through ``AgentRuntime`` (``runtime.store``) and operators
through ``helix_dbos.runtime._facade.operator.Operator``. See docs/public-api.md.
"""

__all__: list[str] = []
