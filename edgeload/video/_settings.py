"""A :class:`~edgeload.video.streams.StreamLoader`'s options, checked once, and the
memory mode its batch slots use."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ._resize import Color, FrameWriter, Layout, ResizeMode
from .source import Policy

OnError = Literal["continue", "raise"]


@dataclass(frozen=True)
class StreamSettings:
    """What the loader's arguments ask for; made in its constructor, never changed.

    Raises:
        ValueError: an option is out of range (named, with the allowed values).
    """

    size: tuple[int, int]
    """Output ``(width, height)`` of every frame, pixels."""
    layout: Layout
    color: Color
    resize: ResizeMode
    policy: Policy | None
    """For every source; None: each source's own."""
    on_error: OnError
    timeout_s: float
    """Most seconds to wait for a batch."""
    batch: int | None
    """Places per batch; None: one per stream."""

    def __post_init__(self) -> None:
        for name, value, allowed in (
            ("layout", self.layout, ("NHWC", "NCHW")),
            ("color", self.color, ("bgr", "rgb")),
            ("resize", self.resize, ("stretch", "letterbox")),
            ("on_error", self.on_error, ("continue", "raise")),
            ("policy", self.policy, ("latest", "every", None)),
        ):
            if value not in allowed:
                raise ValueError(f"StreamLoader: {name} must be one of {allowed}, got {value!r}")
        size = self.size
        if len(size) != 2 or min(size) < 1:
            raise ValueError(f"StreamLoader: size must be (width, height) > 0, got {size}")
        if self.batch is not None and self.batch < 1:
            raise ValueError(f"StreamLoader: batch must be >= 1 or None, got {self.batch}")
        object.__setattr__(self, "size", (int(size[0]), int(size[1])))

    def writer(self) -> FrameWriter:
        """A fresh frame writer for one stream."""
        return FrameWriter(size=self.size, layout=self.layout, color=self.color,
                           resize=self.resize)  # fmt: skip

    def slot_shape(self, places: int) -> tuple[int, int, int, int]:
        """The array shape of a batch slot with ``places`` frames."""
        w, h = self.size
        return (places, h, w, 3) if self.layout == "NHWC" else (places, 3, h, w)


def plan_streams(
    streams: int,
    *,
    frame: tuple[int, int],
    batch: int | None,
    live: bool,
    finite: bool,
    profile: Any,
) -> tuple[Any, Any]:
    """This device (probed) and the plan for a loader of ``streams`` streams on it
    (``live`` and ``finite``: as :func:`~edgeload.platform.plan.plan_for` takes them)."""
    from ..platform.plan import plan_for
    from ..platform.probe import probe

    platform = probe()
    plan = plan_for(streams=streams, frame=frame, batch=batch, live=live, finite=finite,
                    platform=platform, profile=profile)  # fmt: skip
    return platform, plan


def memory_mode_for(memory_mode: str, device: Any, plan: Any, engine: Any) -> tuple[str, str]:
    """The slot memory mode and the reason for it; an explicit GPU mode is checked here,
    in the constructor, not later in the mux thread.

    Raises:
        ProfileError: not a memory mode. PlatformError: the mode needs what this
            machine lacks; the message names the mode that would work.
    """
    from ..cuda.slot_mode import slot_memory_mode

    return slot_memory_mode(
        memory_mode,
        plan.memory_mode,
        plan.reasons["memory_mode"],
        engine=engine,
        to_device=device is not None,
    )
