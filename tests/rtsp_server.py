"""A real RTSP server on loopback for the tests: gst-rtsp-server serving a file in a loop.

Run with Debian's Python, which has the GObject bindings::

    /usr/bin/python3 tests/rtsp_server.py --port 8554 --file clip.mp4

The MP4's H.264 is copied once (ffmpeg, no re-encode) into an Annex B stream, which
``multifilesrc loop=true`` replays forever at the given frame rate.  ``--codec mjpeg``
serves a live test pattern through ``jpegenc`` instead (an MJPEG IP camera's RTP).  Prints
``READY rtsp://127.0.0.1:PORT/stream`` once it listens; stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402


def annexb(mp4: Path, out_dir: Path, codec: str = "h264") -> Path:
    """Copy the H.264 (or H.265) track of ``mp4`` into a raw Annex B file, which loops
    cleanly."""
    out = out_dir / (mp4.stem + "." + codec)
    bsf = "h264_mp4toannexb" if codec == "h264" else "hevc_mp4toannexb"
    fmt = "h264" if codec == "h264" else "hevc"
    subprocess.run(
        ["ffmpeg", "-loglevel", "error", "-y", "-i", str(mp4), "-c:v", "copy",
         "-bsf:v", bsf, "-an", "-f", fmt, str(out)],
        check=True,
        timeout=60,
    )  # fmt: skip
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--file", type=Path, required=True, help="an H.264 MP4")
    parser.add_argument("--fps", type=int, default=30)
    parser.add_argument("--path", default="/stream")
    parser.add_argument("--codec", choices=("h264", "h265", "mjpeg"), default="h264")
    args = parser.parse_args()
    Gst.init(None)
    with tempfile.TemporaryDirectory(prefix="edgeload-rtsp-") as tmp:
        c = args.codec
        if c == "mjpeg":
            # RTP carries 4:2:0 and 4:2:2 JPEG only (RFC 2435): the encoder is given I420.
            launch = (
                "( videotestsrc is-live=true pattern=ball ! "
                f"video/x-raw,format=I420,width=160,height=120,framerate={args.fps}/1 ! jpegenc ! "
                "rtpjpegpay name=pay0 pt=26 )"
            )
        else:
            raw = annexb(args.file, Path(tmp), c)
            launch = (
                f'( multifilesrc location="{raw}" loop=true '
                f'caps="video/x-{c},stream-format=byte-stream,framerate={args.fps}/1" ! '
                f"{c}parse config-interval=-1 ! rtp{c}pay name=pay0 pt=96 config-interval=1 )"
            )
        server = GstRtspServer.RTSPServer()
        server.set_address("127.0.0.1")
        server.set_service(str(args.port))
        factory = GstRtspServer.RTSPMediaFactory()
        factory.set_launch(launch)
        factory.set_shared(True)
        server.get_mount_points().add_factory(args.path, factory)
        if server.attach(None) == 0:
            print(f"could not listen on 127.0.0.1:{args.port}", file=sys.stderr, flush=True)
            return 1
        loop = GLib.MainLoop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, sig, loop.quit)
        print(f"READY rtsp://127.0.0.1:{args.port}{args.path}", flush=True)
        loop.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
