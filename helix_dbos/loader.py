"""Finding the agents to serve from an ``APP`` spec: ``module:attribute``, like uvicorn's.

The module is imported with the working directory on ``sys.path`` (so ``myapp:agent`` finds
``./myapp.py``); the attribute (dotted for nested objects) names an ``Agent``, a list or tuple
of agents, or an ``AgentRegistry``.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback

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
        where = _where_raised(exc)
        raise ConfigError(
            f"Importing {module_name!r} failed{where}: {type(exc).__name__}: {exc}"
        ) from None


def _where_raised(exc: BaseException) -> str:
    """`` at path:line (in function)`` for where ``exc`` was raised: the innermost frame of its
    traceback that is not the import machinery (a syntax error's own file and line), or ``""``.
    A path under the working directory is shown relative to it."""
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        return f" at {_shown_path(exc.filename)}:{exc.lineno}"
    frame = None
    for summary in traceback.extract_tb(exc.__traceback__):
        if not summary.filename.startswith("<frozen ") and "importlib" not in summary.filename:
            frame = summary
    if frame is None:
        return ""
    function = "" if frame.name == "<module>" else f" (in {frame.name})"
    return f" at {_shown_path(frame.filename)}:{frame.lineno}{function}"


def _shown_path(path: str) -> str:
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


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
            f"APP {spec!r} is {_a(type(target).__name__)}: expected an Agent, a list of agents "
            "or an AgentRegistry"
        )
    if not agents:
        raise ConfigError(f"APP {spec!r} names no agents")
    return agents


def _a(noun: str) -> str:
    """``noun`` with its indefinite article: ``an int``, ``a dict``."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"
