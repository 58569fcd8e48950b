"""Finding the agents to serve from an ``APP`` spec: ``module:attribute``, like uvicorn's.

The module is imported with the working directory on ``sys.path`` (so ``myapp:agent`` finds
``./myapp.py``); the attribute (dotted for nested objects) names an ``Agent``, a list or tuple
of agents, or an ``AgentRegistry``.
"""

from __future__ import annotations

import importlib
import os
import sys

from .core.agents import Agent, AgentRegistry
from .errors import ConfigError

__all__ = ["load_agents"]


def load_agents(spec: str) -> list[Agent]:
    """The agents ``spec`` (``module:attribute``) names, in their order.

    Raises:
        ConfigError: a malformed spec, a module that cannot be imported (its error in one
            line), a missing attribute, or an object that is not agents.
    """
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name.strip() or not attribute.strip():
        raise ConfigError(f"APP must be module:attribute (for example myapp:agents), not {spec!r}")
    target = _import(module_name, spec)
    for part in attribute.strip().split("."):
        if not hasattr(target, part):
            raise ConfigError(f"{module_name!r} has no attribute {attribute!r} (APP {spec!r})")
        target = getattr(target, part)
    return _agents_of(target, spec)


def _import(module_name: str, spec: str) -> object:
    """The module ``module_name`` of the APP ``spec``, imported with the working directory on
    ``sys.path``.

    Raises:
        ConfigError: no such module, or its import failed (its error in one line).
    """
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_name.strip())
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.strip().startswith(exc.name):
            raise ConfigError(f"No module {module_name!r} to import for APP {spec!r}") from None
        raise ConfigError(f"Importing {module_name!r} failed: {exc}") from None
    except Exception as exc:
        raise ConfigError(
            f"Importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from None


def _agents_of(target: object, spec: str) -> list[Agent]:
    """The agents the object ``target`` the APP ``spec`` names holds: itself (an ``Agent``),
    the items of a list or tuple of agents, or an ``AgentRegistry``'s agents.

    Raises:
        ConfigError: ``target`` is something else, or it holds no agent.
    """
    if isinstance(target, Agent):
        return [target]
    if (
        isinstance(target, AgentRegistry)
        or isinstance(target, list | tuple)
        and all(isinstance(a, Agent) for a in target)
    ):
        agents = list(target)
    else:
        raise ConfigError(
            f"APP {spec!r} is a {type(target).__name__}: expected an Agent, a list of agents "
            "or an AgentRegistry"
        )
    if not agents:
        raise ConfigError(f"APP {spec!r} names no agents")
    return agents
