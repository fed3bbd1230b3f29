"""StreamLoader refuses, in its constructor, what cannot work here: no thread starts."""

from __future__ import annotations

import threading

import pytest
import torch
from _media import clip, media_dir

from edgeload import probe
from edgeload.errors import EdgeloadError, SourceError
from edgeload.video import StreamLoader, VideoSource

# Whether this OpenCV was built with GStreamer, as `edgeload probe` reports it.
HAS_GSTREAMER = bool(probe().opencv and probe().opencv.gstreamer)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return clip(media_dir(tmp_path_factory), size=(160, 120), fps=30, seconds=0.5)


def _video_threads():
    return [t.name for t in threading.enumerate() if t.name.startswith("edgeload-video")]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA machine can give these")
@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"memory_mode": "pinned"}, "pinned"),
        ({"memory_mode": "managed"}, "managed"),
        ({"device": "cuda"}, "CUDA device"),
    ],
)
def test_a_gpu_setting_without_a_gpu_raises_from_the_constructor(small, kw, match):
    with pytest.raises(EdgeloadError, match=match):
        StreamLoader([small], size=(80, 60), **kw)
    assert _video_threads() == []


@pytest.mark.skipif(HAS_GSTREAMER, reason="this OpenCV can decode with GStreamer")
def test_an_explicit_decode_backend_that_is_missing_raises_from_the_constructor(small):
    with pytest.raises(SourceError, match="GStreamer"):
        StreamLoader([VideoSource(small, backend="gstreamer")], size=(80, 60))
    assert _video_threads() == []


@pytest.mark.skipif(HAS_GSTREAMER, reason="this OpenCV can decode with GStreamer")
def test_add_refuses_a_source_this_machine_cannot_open_and_keeps_the_others(small):
    with StreamLoader([small], size=(80, 60)) as loader:
        with pytest.raises(SourceError, match="GStreamer"):
            loader.add(VideoSource(small, backend="gstreamer"))
        # the refused source never entered the loader: stats() lists only the first
        assert [s["id"] for s in loader.stats()["streams"]] == [0]
    assert _video_threads() == []
