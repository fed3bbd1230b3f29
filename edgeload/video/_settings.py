"""What a :class:`~edgeload.video.streams.StreamLoader` is asked for, checked once in its
constructor, and what this device's plan makes of it.

The arguments (:func:`check_sources`, :class:`StreamSettings`, :func:`model_size`) are
refused with an :class:`~edgeload.errors.ArgumentError` that names the bad value, before
anything is opened.  Then the device and its plan (:func:`plan_streams`), the slot memory
mode (:func:`memory_mode_for`) and the model-ready output (:func:`output_converter`,
:func:`with_output`).  None of it changes while the loader runs.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .. import _args
from .._deps import require_cv2, require_torch
from ..errors import ArgumentError, redact
from ._convert import KEPT_OUTPUTS, Converter, check_output
from ._resize import Color, FrameWriter, Layout, ResizeMode, letterbox_size
from .source import Policy, VideoSource

if TYPE_CHECKING:  # a runtime import would load the CUDA modules early
    from ..cuda.engine import Engine

__all__ = [
    "OnError",
    "StreamSettings",
    "check_sources",
    "memory_mode_for",
    "model_size",
    "output_converter",
    "plan_streams",
    "with_output",
]


def check_sources(sources: object) -> list[Any]:
    """``sources`` as a list, refused when it is one source instead of several.

    Raises:
        ArgumentError: None, a lone path, URL, index or VideoSource (with the list to
            pass instead), or not iterable.
    """
    if isinstance(sources, (str, bytes, int, os.PathLike, VideoSource)) or sources is None:
        shown = redact(repr(sources.display if isinstance(sources, VideoSource) else
                            os.fspath(sources) if isinstance(sources, os.PathLike) else
                            sources))  # fmt: skip
        hint = (
            f"; for one source pass a list: StreamLoader([{shown}])" if sources is not None else ""
        )
        raise ArgumentError(
            f"StreamLoader: sources must be a list of paths, URLs, camera indices, pipelines "
            f"or VideoSource, got {type(sources).__name__} {shown}{hint}"
        )
    try:
        return list(sources)  # type: ignore[call-overload,no-any-return]
    except TypeError:
        raise ArgumentError(
            f"StreamLoader: sources must be a list of sources, got {type(sources).__name__} "
            f"{redact(repr(sources))}"
        ) from None


OnError = Literal["continue", "raise"]


@dataclass(frozen=True)
class StreamSettings:
    """What the loader's arguments ask for; made in its constructor, never changed.

    Raises:
        ArgumentError: an option is of the wrong type or out of range (named, with the
            allowed values).
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
        # Each setting is checked and normalised here, once: the Literal ones in any case.
        owner = "StreamLoader"
        for name, allowed in (
            ("layout", ("NHWC", "NCHW")),
            ("color", ("bgr", "rgb")),
            ("resize", ("stretch", "letterbox")),
            ("on_error", ("continue", "raise")),
        ):
            object.__setattr__(self, name, _args.choice(owner, name, getattr(self, name), allowed))
        policy = _args.choice(owner, "policy", self.policy, ("latest", "every"), none_ok=True)
        object.__setattr__(self, "policy", policy)
        size = _args.pair_of_ints(owner, "size", self.size, what="(width, height)")
        object.__setattr__(self, "size", size)
        batch = _args.integer(owner, "batch", self.batch, low=1, none_ok=True)
        object.__setattr__(self, "batch", batch)
        object.__setattr__(self, "timeout_s", _args.number(owner, "timeout_s", self.timeout_s,
                                                           above=0))  # fmt: skip

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


def model_size(
    size: tuple[int, int] | int,
    *,
    stride: int | None,
    resize: str,
    sources: Sequence[VideoSource],
) -> tuple[int, int]:
    """The output ``(width, height)`` for the loader's ``size`` and ``stride``.

    A batch's shape is fixed when its slots are made, before any live stream has sent a
    frame, so a single ``size`` is decided from what is known now: when every source is
    a local file and all letterbox to the same shape
    (:func:`~edgeload.video._resize.letterbox_size`; their frame sizes read from the
    files' headers), that rectangle; otherwise (a camera or stream, files of several
    aspects, or ``resize="stretch"``) the square, as Ultralytics does for streams of
    differing shapes.  For cameras of a known resolution pass
    ``size=letterbox_size((w, h), n, stride=s)`` instead.

    Raises:
        ArgumentError: ``stride`` below 1, or given with a ``(width, height)`` size.
    """
    if stride is not None and (isinstance(stride, bool) or not isinstance(stride, int)
                               or stride < 1):  # fmt: skip
        raise ArgumentError(f"StreamLoader: stride must be an int >= 1 or None, got {stride!r}")
    if isinstance(size, bool) or not isinstance(size, int):
        if stride is not None:
            raise ArgumentError(
                f"StreamLoader: stride={stride} applies to size=N (a detector's image size, "
                f"the long side); got size={size!r}: pass size=N or drop stride"
            )
        return size  # type: ignore[return-value]  # (width, height): StreamSettings checks it
    step = 1 if stride is None else stride
    if size < 1:
        raise ArgumentError(f"StreamLoader: size must be >= 1, got {size}")
    if resize != "letterbox" or not sources or any(s.kind != "file" or s.network for s in sources):
        return letterbox_size(None, size, stride=step)
    shapes = {letterbox_size(_file_frame_size(s), size, stride=step) for s in sources}
    return shapes.pop() if len(shapes) == 1 else letterbox_size(None, size, stride=step)


def _file_frame_size(source: VideoSource) -> tuple[int, int] | None:
    """A local file's frame ``(width, height)`` from its header; None when unreadable."""
    cv2 = require_cv2()
    cap = cv2.VideoCapture(str(source.uri))
    try:
        w = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH))
        h = int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
    finally:
        cap.release()
    return (w, h) if w > 0 and h > 0 else None


def output_converter(
    dtype: Any,
    mean: Sequence[float] | None,
    std: Sequence[float] | None,
    *,
    layout: Layout,
    memory_mode: str,
    device: Any,
) -> Converter | None:
    """The converter to the loader's float ``dtype``; None for uint8 (the slot is the batch).

    Raises:
        ArgumentError: as :func:`~edgeload.video._convert.check_output`.
    """
    torch = require_torch()
    name, mean_, std_ = check_output(torch.uint8 if dtype is None else dtype, mean, std,
                                     memory_mode=memory_mode, device=device)  # fmt: skip
    if name == "uint8":
        return None
    return Converter(dtype=dtype, mean=mean_, std=std_, layout=layout)


def with_output(plan: Any, name: str, device: Any) -> Any:
    """``plan`` with what a model-ready batch of dtype ``name`` costs, made on ``device``."""
    from ..platform.plan import format_mib

    itemsize = 2 if name == "float16" else 4
    where = "the CPU" if device is None or str(device) == "cpu" else str(device)
    reasons = dict(plan.reasons)
    reasons["output"] = (
        f"{name} batches of {format_mib(plan.slot_bytes * itemsize)} on {where}, "
        f"beside the uint8 slots"
        + (f" (up to {KEPT_OUTPUTS} kept for reuse)" if where == "the CPU" else "")
    )
    return dataclasses.replace(plan, output_bytes=plan.slot_bytes * itemsize, reasons=reasons)


def memory_mode_for(
    memory_mode: str, device: Any, plan: Any, engine: Engine | None
) -> tuple[str, str]:
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
