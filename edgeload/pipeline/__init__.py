"""The core both loaders build on: workers (threads or processes), slots, prefetch, lifecycle."""

from .prefetch import Prefetcher
from .slots import SlotPool
from .workers import WorkerPool

__all__ = ["Prefetcher", "SlotPool", "WorkerPool"]
