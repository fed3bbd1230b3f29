"""Live and recorded video into fixed-size batches: sources, streams, the demo."""

from ._resize import letterbox_size
from .batch import Batch, FrameMeta
from .source import FrameInfo, SourceState, VideoSource
from .streams import StreamLoader, target_for

__all__ = [
    "Batch",
    "FrameInfo",
    "FrameMeta",
    "SourceState",
    "StreamLoader",
    "VideoSource",
    "letterbox_size",
    "target_for",
]
