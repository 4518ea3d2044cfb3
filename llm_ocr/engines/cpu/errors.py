"""The CPU engine's startup error, shared by the modules that load its models."""

from __future__ import annotations


class ModelUnavailable(RuntimeError):
    """A model file the engine needs is not on disk (and will not be downloaded)."""
