"""The GStreamer pipelines edgeload writes for a source, with the board's decoder.

The decoder is the board's hardware one where it has one: ``nvv4l2decoder`` +
``nvvidconv`` on a Jetson, ``v4l2h264dec`` on a Raspberry Pi 4 (BCM2711 and older),
``avdec_h264`` (software) elsewhere.  Every pipeline ends in BGR for OpenCV, and live
inputs in ``appsink drop=true max-buffers=1 sync=false`` so a slow consumer never
builds lag.
"""

from __future__ import annotations

from typing import Any

LIVE_SINK = "appsink drop=true max-buffers=1 sync=false"
FILE_SINK = "appsink max-buffers=2 sync=false"
TO_BGR = "videoconvert ! video/x-raw,format=BGR"
_DECODERS = {
    # name -> decoder chain ending in raw video the next element can convert
    "jetson": "nvv4l2decoder ! nvvidconv ! video/x-raw,format=BGRx",
    "rpi4": "v4l2h264dec",
    "software": "avdec_h264",
}


def quote(value: str) -> str:
    """``value`` as one quoted GStreamer property value: it cannot end the property or
    add elements, whatever it holds (``!``, quotes, spaces, ``=``).

    gst-launch syntax reads a double-quoted string as one token and takes a backslash
    inside it to escape the next character.
    """
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def hardware_decoder(platform: Any) -> str:
    """The decoder chain name for this board: ``jetson``, ``rpi4`` or ``software``."""
    family = str(getattr(platform, "family", "") or "")
    soc = str(getattr(platform, "soc", "") or "").lower()
    if family == "jetson":
        return "jetson"
    # Only the Pi 4's BCM2711 (and older) have the V4L2 H.264 decoder; a Pi 5 has none.
    if family == "raspberry_pi" and any(s in soc for s in ("2711", "2837", "2836", "2835")):
        return "rpi4"
    return "software"


def csi_pipeline(sensor: int) -> str:
    """A Jetson CSI camera (``csi://N``) through Argus."""
    return (
        f"nvarguscamerasrc sensor-id={sensor} ! video/x-raw(memory:NVMM),framerate=30/1 ! "
        f"nvvidconv ! video/x-raw,format=BGRx ! {TO_BGR} ! {LIVE_SINK}"
    )


def device_pipeline(device: str) -> str:
    """A V4L2 camera (``/dev/videoN``)."""
    return f"v4l2src device={quote(device)} ! {TO_BGR} ! {LIVE_SINK}"


def decode_pipeline(kind: str, location: str, decoder: str, transport: str) -> str:
    """An H.264 file, RTSP stream (over ``transport``) or HTTP stream, decoded with
    ``decoder`` (a :func:`hardware_decoder` name)."""
    chain = _DECODERS.get(decoder, _DECODERS["software"])
    if kind == "rtsp":
        # rtspsrc tries UDP first and falls back to TCP only after a timeout: ask.
        head = (
            f"rtspsrc location={quote(location)} latency=0 protocols={transport} "
            "! rtph264depay ! h264parse"
        )
        sink = LIVE_SINK
    elif kind == "http":
        head = f"souphttpsrc location={quote(location)} is-live=true ! decodebin"
        return f"{head} ! {TO_BGR} ! {LIVE_SINK}"
    else:
        demux = "matroskademux" if location.lower().endswith(".mkv") else "qtdemux"
        head = f"filesrc location={quote(location)} ! {demux} ! h264parse"
        sink = FILE_SINK
    return f"{head} ! {chain} ! {TO_BGR} ! {sink}"
