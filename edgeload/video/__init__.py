"""Live and recorded video into fixed-size batches: sources, streams, the demo."""

from .source import FrameInfo, SourceState, VideoSource
from .streams import Batch, FrameMeta, StreamLoader

__all__ = ["Batch", "FrameInfo", "FrameMeta", "SourceState", "StreamLoader", "VideoSource"]
