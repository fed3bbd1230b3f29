"""Batches and their metadata: where each frame's picture lies, and boxes mapped back to
the camera's frame (``FrameMeta.to_source``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _media import media_dir, square_clip
from hypothesis import given, settings
from hypothesis import strategies as st

from edgeload.errors import ArgumentError
from edgeload.video import StreamLoader, letterbox_size

# Internal: the frame writer's geometry over arbitrary sizes and boxes (hypothesis); the
# loader tests above check the same through StreamLoader on real clips.
from edgeload.video._resize import FrameWriter
from edgeload.video.batch import FrameMeta

_SQUARE = (100, 40, 180, 120)  # x0, y0, x1, y1 in the 320 x 180 source


@pytest.fixture(scope="module")
def squares(tmp_path_factory):
    root = media_dir(tmp_path_factory)
    return {
        "wide": square_clip(root, size=(320, 180), square=_SQUARE),
        "tall": square_clip(root, size=(120, 200), square=(20, 60, 60, 100)),
    }


def _bright_box(image_hwc):
    """xyxy bounding box (output pixels, exclusive ends) of the white pixels."""
    ys, xs = np.nonzero(image_hwc.mean(axis=-1) > 128)
    return np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], np.float32)


def _hwc(frame, layout):
    array = frame.numpy()
    return array if layout == "NHWC" else array.transpose(1, 2, 0)


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize(
    ("resize", "scale", "pad"),
    [("letterbox", (0.4, 0.4), (0, 28)), ("stretch", (0.4, 128 / 180), (0, 0))],
)
def test_a_drawn_square_maps_back_to_where_it_was_drawn(squares, layout, resize, scale, pad):
    with StreamLoader([squares["wide"]], size=(128, 128), resize=resize, layout=layout,
                      color="rgb", policy="every") as loader:  # fmt: skip
        batch = next(iter(loader))
    meta = batch.meta[0]
    assert meta.source_size == (320, 180)
    assert meta.scale == pytest.approx(scale)
    assert meta.pad == pad
    seen = _bright_box(_hwc(batch.frames[0], layout))
    # Where the mapping says the square is, the batch shows it (within a pixel).
    expected_out = np.array(_SQUARE, np.float32) * np.tile(scale, 2) + np.tile(pad, 2)
    assert np.abs(seen - expected_out).max() <= 1.0, (seen, expected_out)
    back = meta.to_source(seen)
    assert np.abs(back - np.array(_SQUARE)).max() <= 1.0 / min(scale) + 0.5, back
    back_t = meta.to_source(torch.from_numpy(seen))
    assert isinstance(back_t, torch.Tensor)
    assert torch.allclose(back_t, torch.from_numpy(back))


def test_each_place_keeps_its_own_streams_geometry(squares):
    with StreamLoader([squares["wide"], squares["tall"]], size=(96, 96), resize="letterbox",
                      policy="every") as loader:  # fmt: skip
        batch = next(iter(loader))
    wide, tall = batch.meta
    assert (wide.source_size, wide.pad) == ((320, 180), (0, 21))
    assert (tall.source_size, tall.pad) == ((120, 200), (19, 0))
    assert tall.scale == pytest.approx((58 / 120, 96 / 200))
    found = tall.to_source(_bright_box(batch.frames[1].numpy()))
    assert np.abs(found - np.array([20, 60, 60, 100])).max() <= 200 / 96 + 0.5, found


def _meta(geometry):
    return FrameMeta(0, 0, 0.0, 0.0, 0.0, 0, geometry.source_size, geometry.scale, geometry.pad)


@settings(max_examples=150, deadline=None)
@given(
    source=st.tuples(st.integers(8, 400), st.integers(8, 400)),
    out=st.tuples(st.integers(8, 320), st.integers(8, 320)),
    resize=st.sampled_from(["letterbox", "stretch"]),
    corners=st.tuples(*[st.floats(0, 1)] * 4),
)
def test_a_box_round_trips_through_the_writers_geometry(source, out, resize, corners):
    (sw, sh), (ow, oh) = source, out
    writer = FrameWriter(size=out, layout="NHWC", color="bgr", resize=resize)
    fx0, fy0, fx1, fy1 = corners
    x0, x1 = sorted((round(fx0 * sw), round(fx1 * sw)))
    y0, y1 = sorted((round(fy0 * sh), round(fy1 * sh)))
    frame = np.zeros((sh, sw, 3), np.uint8)
    frame[y0:y1, x0:x1] = 255
    place = np.empty((oh, ow, 3), np.uint8)
    geometry = writer.write(frame, place)
    (sx, sy), (left, top) = geometry.scale, geometry.pad
    mapped = np.array([left + x0 * sx, top + y0 * sy, left + x1 * sx, top + y1 * sy])
    # The writer put the box where its geometry says: bright well inside, dark well
    # outside (a resize blurs each edge by about one pixel either side, more upscaled).
    inside = (int(mapped[0]) + 1, int(mapped[1]) + 1, int(np.ceil(mapped[2])) - 1,
              int(np.ceil(mapped[3])) - 1)  # fmt: skip
    if inside[2] - inside[0] >= 1 and inside[3] - inside[1] >= 1:
        cy, cx = (inside[1] + inside[3]) // 2, (inside[0] + inside[2]) // 2
        assert place[cy, cx].min() > 200
    reach = int(np.ceil(max(sx, sy))) + 2
    if x0 < x1 and y0 < y1:
        row = int((mapped[1] + mapped[3]) / 2)
        outside = int(np.ceil(mapped[2])) + reach
        if outside < left + geometry.box[3]:
            assert place[row, outside].max() < 40
    # And back: to_source undoes the mapping within a pixel, clipped to the frame.
    back = _meta(geometry).to_source(mapped.astype(np.float32))
    assert np.abs(back - np.array([x0, y0, x1, y1])).max() <= 1.0
    assert back.dtype == np.float32
    wide = _meta(geometry).to_source(torch.tensor([[-50.0, -50.0, ow + 50.0, oh + 50.0]]))
    assert wide.tolist() == [[0.0, 0.0, float(sw), float(sh)]]


@pytest.mark.parametrize(
    "boxes",
    [np.zeros((3, 5)), torch.zeros(2, 3), [[0, 0, 1, 1]], np.zeros((2, 2, 4)), np.float32(1)],
)
def test_to_source_refuses_what_is_not_n_by_4(boxes):
    meta = FrameMeta(0, 0, 0.0, 0.0, 0.0, 0, (640, 480), (0.5, 0.5), (0, 40))
    with pytest.raises(ArgumentError, match=r"boxes must be an \(N, 4\) xyxy"):
        meta.to_source(boxes)


@pytest.mark.parametrize(
    ("source", "long_side", "stride", "want"),
    [
        ((640, 480), 320, 32, (320, 256)),  # Ultralytics' own example
        ((480, 640), 320, 32, (256, 320)),
        ((1366, 768), 416, 32, (416, 256)),
        ((1920, 1080), 640, 32, (640, 384)),
        ((640, 480), 320, 1, (320, 240)),
        (None, 320, 32, (320, 320)),
        (None, 330, 32, (352, 352)),
    ],
)
def test_letterbox_size_rounds_each_side_up_to_the_stride(source, long_side, stride, want):
    assert letterbox_size(source, long_side, stride=stride) == want


def test_a_files_loader_letterboxes_to_the_models_stride(tmp_path_factory):
    square = (100, 60, 180, 140)
    path = square_clip(media_dir(tmp_path_factory), size=(320, 240), square=square)
    with StreamLoader([path], size=160, stride=32, resize="letterbox", policy="every") as loader:
        assert loader.size == (160, 128)
        batch = next(iter(loader))
    assert batch.frames.shape == (1, 128, 160, 3)
    meta = batch.meta[0]
    assert (meta.source_size, meta.pad, meta.scale) == ((320, 240), (0, 4), (0.5, 0.5))
    found = meta.to_source(_bright_box(batch.frames[0].numpy()))
    assert np.abs(found - np.array(square)).max() <= 2.5, found


def test_streams_of_several_aspects_or_live_ones_take_the_square(squares):
    with StreamLoader([squares["wide"], squares["tall"]], size=96, stride=32,
                      resize="letterbox") as loader:  # fmt: skip
        assert loader.size == (96, 96)
    with StreamLoader(["rtsp://127.0.0.1:9/none"], size=100, stride=32,
                      resize="letterbox") as loader:  # fmt: skip
        assert loader.size == (128, 128)
    with StreamLoader([squares["wide"]], size=96, stride=32) as loader:  # stretch
        assert loader.size == (96, 96)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"size": (320, 256), "stride": 32},
            r"stride=32 applies to size=N .* got size=\(320, 256\)",
        ),
        ({"size": 320, "stride": 0}, r"stride must be an int >= 1 or None, got 0"),
        ({"size": 0}, r"size must be >= 1, got 0"),
    ],
)
def test_bad_stride_arguments_say_what_to_pass(squares, kwargs, match):
    with pytest.raises(ArgumentError, match=match):
        StreamLoader([squares["wide"]], resize="letterbox", **kwargs)


def _yuv_planes(bgr, layout):
    """``bgr`` as one (H*3/2, W) plane, as OpenCV's GStreamer backend hands it over."""
    import cv2

    i420 = cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV_I420)
    if layout == "I420":
        return i420
    h, w = bgr.shape[:2]
    flat = i420.reshape(-1)
    u, v = flat[h * w : h * w * 5 // 4], flat[h * w * 5 // 4 :]
    return np.concatenate([flat[: h * w], np.stack([u, v], 1).reshape(-1)]).reshape(-1, w)


@pytest.mark.parametrize("layout", ["I420", "NV12"])
@pytest.mark.parametrize(
    ("out", "resize"),
    [((96, 64), "stretch"), ((96, 96), "letterbox"), ((90, 70), "letterbox"),
     ((95, 61), "stretch")],  # the last: odd sides, converted first, then resized
)  # fmt: skip
def test_a_yuv_frame_at_decoded_size_is_scaled_like_a_bgr_one(layout, out, resize):
    """A software pipeline hands over YUV as decoded; the writer scales its planes and
    converts once.  The picture, its place and the padding are the BGR path's."""
    yy, xx = np.mgrid[0:180, 0:320]
    bgr = np.dstack([xx * 255 // 319, yy * 255 // 179, (xx + yy) * 255 // 498])
    bgr = bgr.astype(np.uint8)
    bgr[40:120, 100:180] = (30, 200, 90)
    places = {}
    for kind in ("bgr", "yuv"):
        writer = FrameWriter(size=out, layout="NCHW", color="rgb", resize=resize)
        frame = bgr
        if kind == "yuv":
            writer.yuv, frame = layout, _yuv_planes(bgr, layout)
        place = np.zeros((3, out[1], out[0]), np.uint8)
        for _ in range(2):  # the second frame reuses the scratch plane
            geometry = writer.write(frame, place)
        places[kind] = (place.astype(int), geometry)
    (ours, ours_geometry), (theirs, theirs_geometry) = places["yuv"], places["bgr"]
    assert ours_geometry == theirs_geometry
    assert ours_geometry.source_size == (320, 180)
    assert np.abs(ours - theirs).mean() < 3  # YUV 4:2:0 round trip, two resize orders
    top, left, h, w = ours_geometry.box
    assert (ours[:, :top] == 114).all() and (ours[:, top + h :] == 114).all()
    assert (ours[:, :, :left] == 114).all() and (ours[:, :, left + w :] == 114).all()
