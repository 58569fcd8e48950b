"""The launched-runtime fixture of the runtime tests, for the in-process server tests here."""

from tests.runtime.conftest import make_runtime

__all__ = ["make_runtime"]
