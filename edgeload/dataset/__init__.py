"""The torch-compatible DataLoader: its epoch, exact resume, collate into slots."""

from .loader import DataLoader, get_worker_info

__all__ = ["DataLoader", "get_worker_info"]
