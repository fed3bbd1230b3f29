"""The words edgeload's settings are made of, defined once.

Every module that names a worker kind, a memory mode or a decode backend imports it from
here, so a profile file, the plan, the slot pool, the GPU checks and autotune can never
disagree about which values exist. ``"auto"`` is never a value of these types: it is
what a setting holds before the plan resolves it (see :data:`AUTO`).
"""

from __future__ import annotations

from typing import Literal

WorkerKind = Literal["thread", "process"]
WORKER_KINDS: tuple[WorkerKind, ...] = ("thread", "process")

MemoryMode = Literal["host", "pinned", "mapped", "managed"]
MEMORY_MODES: tuple[MemoryMode, ...] = ("host", "pinned", "mapped", "managed")
# The modes whose slots CUDA allocates: each needs a CUDA-capable torch.
GPU_MEMORY_MODES: tuple[MemoryMode, ...] = ("pinned", "mapped", "managed")

DecodeBackend = Literal["gstreamer", "ffmpeg"]
DECODE_BACKENDS: tuple[DecodeBackend, ...] = ("gstreamer", "ffmpeg")

# A setting the plan chooses for this device.
AUTO = "auto"
WorkerKindSetting = Literal["auto", "thread", "process"]
MemoryModeSetting = Literal["auto", "host", "pinned", "mapped", "managed"]
DecodeBackendSetting = Literal["auto", "gstreamer", "ffmpeg"]
