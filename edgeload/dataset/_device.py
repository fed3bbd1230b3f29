"""The loader's GPU edge: checking a GPU memory mode up front, and pinning batches.

With ``engine=`` (``edgeload.cuda.engine``) the GPU calls go to that engine, so a
``HostEngine`` runs the ``pin_memory`` and GPU-mode paths on a machine without CUDA.
"""

from __future__ import annotations

from typing import Any

from ..vocabulary import GPU_MEMORY_MODES


def check_gpu_mode(memory_mode: str, engine: Any) -> None:
    """Raise PlatformError now (in the constructor) if an explicit GPU mode cannot work."""
    if memory_mode in GPU_MEMORY_MODES:
        from ..cuda.slot_mode import check_slot_mode

        check_slot_mode(memory_mode, engine)
