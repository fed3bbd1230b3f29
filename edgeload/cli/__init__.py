"""The ``edgeload`` command: argument parsing and printing only (probe, demo, autotune)."""

from .main import main

__all__ = ["main"]
