"""The package's version, in a module of its own so that any layer may read it without
importing the package root (which re-exports it as ``helix_dbos.__version__``)."""

__version__ = "0.1.0"
