"""Loopback RTSP cameras that draw their capture time into every frame.

Each camera is a gst-rtsp-server mount fed by an ``appsrc``: a thread makes an I420
frame every ``1/fps`` seconds, writes the wall-clock time it made it (milliseconds,
32 bits) into the top quarter of the picture as large black and white blocks, and
pushes it to x264 (ultrafast, zero latency) and RTP.  Whoever receives the frame,
after any decode, colour conversion or resize that keeps the blocks' places, reads
the time back with :func:`read_stamp`, so every reader's true capture-to-consumer
age is measured the same way.  Run with Debian's Python (GObject bindings)::

    /usr/bin/python3 tests/clock_camera.py --port 8554 --cameras 4 --size 960x540

Prints ``READY url0 url1 ...`` once it listens; stops on SIGTERM or SIGINT.
The codec half (:func:`stamp`, :func:`read_stamp`, :func:`age_ms`) needs numpy only.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time

import numpy as np

COLS = 16
DATA_BITS = 32
CHECK_BITS = 16  # the complement of the low 16 bits: a misread frame is rejected
ROWS = (DATA_BITS + CHECK_BITS) // COLS
_BLACK, _WHITE = 16, 235


def _bits(value: int) -> list[int]:
    data = [(value >> i) & 1 for i in range(DATA_BITS)]
    return data + [1 - data[i] for i in range(CHECK_BITS)]


def _block(shape: tuple[int, ...], k: int) -> tuple[slice, slice]:
    h, w = shape[0], shape[1]
    bh, bw = h // (4 * ROWS), w // COLS
    r, c = divmod(k, COLS)
    return slice(r * bh, (r + 1) * bh), slice(c * bw, (c + 1) * bw)


def stamp(luma: np.ndarray, value_ms: int) -> None:
    """Draw ``value_ms`` (mod 2**32) into the top quarter of a luma plane."""
    for k, bit in enumerate(_bits(value_ms & 0xFFFFFFFF)):
        rows, cols = _block(luma.shape, k)
        luma[rows, cols] = _WHITE if bit else _BLACK


def read_stamp(image: np.ndarray, *, white: float = 255.0) -> int | None:
    """The time drawn into ``image`` (H x W grey, or H x W x 3), or None if unreadable.

    ``white`` is the value of a white pixel (1.0 for a float picture in [0, 1]), so a
    model's float input is read where it lies, without a uint8 copy.
    """
    grey = image[..., 1] if image.ndim == 3 else image
    bits = []
    for k in range(DATA_BITS + CHECK_BITS):
        rows, cols = _block(grey.shape, k)
        h, w = rows.stop - rows.start, cols.stop - cols.start
        centre = grey[
            rows.start + h // 4 : rows.stop - h // 4, cols.start + w // 4 : cols.stop - w // 4
        ]
        bits.append(1 if float(centre.mean()) > white / 2 else 0)
    value = sum(bit << i for i, bit in enumerate(bits[:DATA_BITS]))
    return value if bits == _bits(value) else None


def age_ms(image: np.ndarray, now_s: float | None = None) -> float | None:
    """Milliseconds from the frame's capture to ``now_s`` (``time.time()``), or None."""
    value = read_stamp(image)
    if value is None:
        return None
    now = int((time.time() if now_s is None else now_s) * 1000) & 0xFFFFFFFF
    return float((now - value) & 0xFFFFFFFF)


class _Feeder:
    """Pushes stamped frames into one appsrc at ``fps`` until the media goes away."""

    def __init__(self, appsrc: object, size: tuple[int, int], fps: int, seed: int) -> None:
        self.appsrc, self.size, self.fps = appsrc, size, fps
        w, h = size
        # A moving texture below the stamp gives the encoder real work every frame.
        rng = np.random.default_rng(seed)
        self.texture = rng.integers(40, 200, (h, 2 * w), dtype=np.uint8)
        self.texture = np.repeat(np.repeat(self.texture[::8, ::8], 8, 0), 8, 1)[:h, : 2 * w]
        self.stop = threading.Event()
        threading.Thread(target=self.run, daemon=True).start()

    def run(self) -> None:
        from gi.repository import Gst

        w, h = self.size
        frame = np.full(w * h * 3 // 2, 128, np.uint8)  # I420; chroma stays grey
        luma = frame[: w * h].reshape(h, w)
        start, n = time.monotonic(), 0
        while not self.stop.is_set():
            wait = start + n / self.fps - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            elif wait < -1.0:  # far behind (a loaded box): skip ahead, like a camera
                start, n = time.monotonic(), 0
            shift = (n * 4) % w
            luma[:] = self.texture[:, shift : shift + w]
            stamp(luma, int(time.time() * 1000))
            buf = Gst.Buffer.new_wrapped(frame.tobytes())
            if self.appsrc.emit("push-buffer", buf) != Gst.FlowReturn.OK:  # type: ignore[attr-defined]
                return  # the media was torn down (no more clients, or the server stops)
            n += 1


def main() -> int:
    import gi

    gi.require_version("Gst", "1.0")
    gi.require_version("GstRtspServer", "1.0")
    from gi.repository import GLib, Gst, GstRtspServer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cameras", type=int, default=1)
    parser.add_argument("--size", default="640x360", help="WIDTHxHEIGHT")
    parser.add_argument("--fps", type=int, default=30)
    args = parser.parse_args()
    w, h = (int(x) for x in args.size.split("x"))
    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(str(args.port))
    feeders: list[_Feeder] = []
    launch = (
        "( appsrc name=src is-live=true format=time do-timestamp=true "
        f"caps=video/x-raw,format=I420,width={w},height={h},framerate={args.fps}/1 ! "
        f"x264enc tune=zerolatency speed-preset=ultrafast key-int-max={args.fps} bframes=0 "
        "threads=1 ! rtph264pay name=pay0 pt=96 config-interval=1 )"
    )
    urls = []
    for cam in range(args.cameras):
        factory = GstRtspServer.RTSPMediaFactory()
        factory.set_launch(launch)
        factory.set_shared(True)

        def configure(_factory: object, media: object, seed: int = cam) -> None:
            src = media.get_element().get_by_name("src")  # type: ignore[attr-defined]
            feeder = _Feeder(src, (w, h), args.fps, seed)
            feeders.append(feeder)
            media.connect("unprepared", lambda *_: feeder.stop.set())  # type: ignore[attr-defined]

        factory.connect("media-configure", configure)
        server.get_mount_points().add_factory(f"/cam{cam}", factory)
        urls.append(f"rtsp://127.0.0.1:{args.port}/cam{cam}")
    if server.attach(None) == 0:
        print(f"could not listen on 127.0.0.1:{args.port}", file=sys.stderr, flush=True)
        return 1
    loop = GLib.MainLoop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, sig, loop.quit)
    print("READY " + " ".join(urls), flush=True)
    loop.run()
    for feeder in feeders:
        feeder.stop.set()
    return 0


if __name__ == "__main__":
    sys.exit(main())
