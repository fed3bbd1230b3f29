"""The memory mode a loader's slots use, and why: one rule for both loaders.

The plan proposes a mode for this device; a loader takes it for ``memory_mode="auto"``,
or checks the mode the user named (on the loader's engine, or on this machine) and
says so.  Slots shared with worker processes stay in host memory, which is the only
memory a GPU mode's pages cannot be handed over in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a runtime import would load the CUDA modules early
    from .engine import Engine

__all__ = ["check_slot_mode", "slot_memory_mode"]


def check_slot_mode(mode: str, engine: Engine | None = None) -> None:
    """Raise unless ``mode`` names slot memory that ``engine`` (or this machine) gives.

    Raises:
        ProfileError: not a memory mode.
        PlatformError: a GPU mode this machine lacks; the message names one that works.
    """
    if mode == "host":
        return
    from .status import MEMORY_MODES, check_memory_mode  # the CUDA runtime: GPU modes only

    if engine is None or mode not in MEMORY_MODES:
        check_memory_mode(mode)
    else:
        engine.check_memory_mode(mode)


def slot_memory_mode(
    asked: str,
    plan_mode: str,
    plan_reason: str,
    *,
    engine: Engine | None = None,
    to_device: bool = True,
    shared: bool = False,
) -> tuple[str, str]:
    """The slot memory mode and a one-line reason for it.

    Args:
        asked: the loader's ``memory_mode=``: ``"auto"`` or a mode.
        plan_mode, plan_reason: what the plan chose for this device, and why.
        engine: the loader's GPU engine (None: CUDA through torch).
        to_device: batches go to a GPU; without (the StreamLoader without
            ``device=``), ``"auto"`` keeps frames in host memory.
        shared: the slots are shared with worker processes.

    Raises:
        ProfileError, PlatformError: as :func:`check_slot_mode`, for an asked mode.
    """
    if asked == "auto" and not to_device:
        mode, reason = "host", "no device= given: frames stay in host memory"
    elif asked == "auto":
        mode, reason = plan_mode, plan_reason
    else:
        check_slot_mode(asked, engine)
        on = "" if engine is None else f", on the {engine.name} engine"
        mode, reason = asked, f"set by arguments{on} (the plan: {plan_reason})"
    if shared and mode != "host":
        return "host", "process workers write shared host slots"
    return mode, reason
