"""Why a camera will not open, found before OpenCV is asked to open it: :func:`preflight`.

OpenCV's answer to an open that fails is ``isOpened() == False``: the cause (a refused
connection, a wrong path on the camera, a missing device) goes only to FFmpeg's or
OpenCV's log on stderr, and an open of a camera that accepts and never answers blocks
for OpenCV's own limit.  So before a network URL or a local device reaches OpenCV, the
reader checks what can be checked cheaply, in at most the source's open timeout:

- network URLs: the host resolves; a TCP connection is accepted (refused and timed
  out are told apart);
- ``rtsp://``: the camera answers an RTSP ``DESCRIBE`` for the URL, over a plain socket,
  with a status: 404 is a wrong path, 401 without credentials in the URL asks for them,
  and silence means a hung camera (401 with credentials is left to OpenCV, which does
  the digest exchange);
- ``/dev/videoN`` and camera indices (Linux): the device node exists, opening it is
  not refused (permissions), and the driver does not report its buffer queue busy
  (another program capturing from it).

A check that passes proves little (OpenCV may still fail to decode); one that fails
names the real cause, and OpenCV never sees that URL, so its log says nothing.  Every
wait polls the reader's stop event, so ``close()`` never waits for a check.
"""

from __future__ import annotations

import errno
import fcntl
import os
import select
import socket
import struct
import sys
import threading
import time
from typing import Any
from urllib.parse import SplitResult, urlsplit, urlunsplit

from ..errors import redact
from ..pipeline._lifecycle import POLL_INTERVAL_S

_DEFAULT_PORTS = {"rtsp": 554, "rtsps": 322, "http": 80, "https": 443}
_MAX_REPLY = 64 * 1024  # an RTSP status line and headers fit well within this

# struct v4l2_requestbuffers (linux/videodev2.h), 20 bytes: u32 count, u32 type, u32 memory,
# u32 capabilities, u8 flags, u8 reserved[3] (older kernels have reserved words in place
# of the last two fields: the same size, so the same ioctl number).
_REQUESTBUFFERS = struct.Struct("=4IB3x")
# _IOWR('V', 8, struct v4l2_requestbuffers) in the generic encoding x86 and ARM use:
# direction read|write (3) << 30 | size << 16 | type 'V' << 8 | number 8 = 0xC0145608.
_VIDIOC_REQBUFS = (3 << 30) | (_REQUESTBUFFERS.size << 16) | (ord("V") << 8) | 8
_V4L2_BUF_TYPE_VIDEO_CAPTURE = 1
_V4L2_BUF_TYPE_VIDEO_CAPTURE_MPLANE = 9
_V4L2_MEMORY_MMAP = 1


class _Stopped(Exception):
    """The reader was asked to stop during a check."""


def preflight(kind: str, uri: str | int, *, timeout_s: float, stop: threading.Event) -> str | None:
    """What keeps source ``uri`` of ``kind`` from opening, or None when nothing was found.

    Takes at most about ``timeout_s``, and returns None at once when ``stop`` is set.

    Args:
        kind: the source's kind (``rtsp``, ``http``, ``device``; others pass).
        uri: the source as given (URL with its credentials, device path or index).
        timeout_s: the source's open timeout.
        stop: the reader's stop event.
    """
    try:
        if kind in ("rtsp", "http"):
            return redact_cause(_network(str(uri), timeout_s, stop))
        if kind == "device":
            return _device(uri)
    except _Stopped:
        return None
    return None


def redact_cause(cause: str | None) -> str | None:
    """``cause`` with any credentials hidden."""
    return None if cause is None else redact(cause)


def _device(uri: str | int) -> str | None:
    if not sys.platform.startswith("linux"):
        return None  # other systems name cameras otherwise: OpenCV decides
    path = f"/dev/video{uri}" if isinstance(uri, int) else str(uri)
    if not path.startswith("/dev/video"):
        return None
    if not os.path.exists(path):
        present = sorted(n for n in os.listdir("/dev") if n.startswith("video"))
        return (
            f"no such device {path!r} (cameras here: {', '.join(present) or 'none'}); "
            "check that the camera is plugged in and its number"
        )
    busy = (
        f"device {path!r} is busy: another program is capturing from it; close that "
        f"program (`fuser -v {path}` names it)"
    )
    try:
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.EBUSY:
            return busy
        if exc.errno in (errno.EACCES, errno.EPERM):
            return (
                f"no permission to open {path!r}; add this user to the 'video' group "
                "(sudo usermod -aG video $USER, then log in again)"
            )
        return f"device {path!r} cannot be opened: {exc.strerror or exc}"
    try:
        return busy if _queue_taken(fd) else None
    finally:
        os.close(fd)


def _queue_taken(fd: int) -> bool:
    """Whether another file handle owns the capture buffer queue of V4L2 device ``fd``.

    A camera another program captures from still opens: V4L2 drivers refuse the second
    handle only when it asks for the buffer queue, with EBUSY (uvcvideo's privilege
    check, videobuf2's queue owner check, both in VIDIOC_REQBUFS).  Asking for 0 MMAP
    buffers is safe on an idle camera: it frees this handle's buffers, which are none,
    starts no capture and leaves no ownership behind (both drivers drop it at count 0).
    Any other answer (ENOTTY from a node that is not V4L2, EINVAL from a node without
    this buffer type, e.g. a metadata node) is no finding: OpenCV decides.
    """
    for buf_type in (_V4L2_BUF_TYPE_VIDEO_CAPTURE, _V4L2_BUF_TYPE_VIDEO_CAPTURE_MPLANE):
        request = bytearray(_REQUESTBUFFERS.pack(0, buf_type, _V4L2_MEMORY_MMAP, 0, 0))
        try:
            fcntl.ioctl(fd, _VIDIOC_REQBUFS, request)
        except OSError as exc:
            if exc.errno == errno.EBUSY:
                return True
            if exc.errno == errno.EINVAL:
                continue  # not this buffer type: try the multi-planar one
            return False
        return False
    return False


def _network(url: str, timeout_s: float, stop: threading.Event) -> str | None:
    parts = urlsplit(url)
    scheme, host = parts.scheme.lower(), parts.hostname
    if not host:
        return f"{url!r} names no host; give one, e.g. rtsp://192.168.1.10/stream"
    try:
        port = parts.port or _DEFAULT_PORTS.get(scheme, 80)
    except ValueError:
        return f"{url!r} has an invalid port; give a number from 1 to 65535"
    deadline = time.monotonic() + timeout_s
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return f"host {host!r} not found ({exc.strerror or exc}); check the name or use its IP"
    where = f"{host}:{port}"
    sock, cause = _connect(infos, deadline, stop, where, timeout_s)
    if sock is None:
        return cause
    with sock:
        if scheme != "rtsp":
            return None  # rtsps needs TLS and HTTP a GET that would start the stream
        return _describe(sock, parts, deadline, stop, where, timeout_s)


def _connect(
    infos: list[tuple[Any, ...]],
    deadline: float,
    stop: threading.Event,
    where: str,
    timeout_s: float,
) -> tuple[socket.socket | None, str]:
    """A connected socket, or None and why not (refused, or no answer in time)."""
    cause = f"no answer from {where} within the {timeout_s:g} s open timeout"
    for family, type_, proto, _, address in infos:
        sock = socket.socket(family, type_, proto)
        sock.setblocking(False)
        err = sock.connect_ex(address)
        if err not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
            sock.close()
            cause = _refused(where, err)
            continue
        try:
            ok = _wait(sock, deadline, stop, write=True)
        except _Stopped:
            sock.close()
            raise
        err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) if ok else -1
        if ok and err == 0:
            return sock, ""
        sock.close()
        if err > 0:
            cause = _refused(where, err)
        else:
            cause = (
                f"no answer from {where} within the {timeout_s:g} s open timeout (host "
                "down, or a firewall drops the packets)"
            )
    return None, cause


def _refused(where: str, err: int) -> str:
    if err == errno.ECONNREFUSED:
        return (
            f"connection to {where} refused: nothing listens there; check that the "
            "camera is on and the port is right"
        )
    return f"cannot connect to {where}: {os.strerror(err)}"


def _wait(sock: socket.socket, deadline: float, stop: threading.Event, *, write: bool) -> bool:
    """Wait for ``sock`` to be ready, polling ``stop``; False at the deadline."""
    while True:
        if stop.is_set():
            raise _Stopped
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        wait = min(POLL_INTERVAL_S, left)
        ready = (
            select.select([], [sock], [], wait) if write else select.select([sock], [], [], wait)
        )
        if ready[1] or ready[0]:
            return True


def _describe(
    sock: socket.socket, parts: SplitResult, deadline: float, stop: threading.Event, where: str,
    timeout_s: float,
) -> str | None:  # fmt: skip
    """Ask the camera to DESCRIBE the stream and read its status."""
    netloc = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
    if ":" in (parts.hostname or "") and parts.hostname:
        netloc = f"[{parts.hostname}]" + ("" if parts.port is None else f":{parts.port}")
    plain = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
    request = (
        f"DESCRIBE {plain} RTSP/1.0\r\nCSeq: 1\r\nAccept: application/sdp\r\n"
        "User-Agent: edgeload\r\n\r\n"
    ).encode()
    try:
        sock.sendall(request)  # small: fits the socket buffer of a fresh connection
    except OSError as exc:
        return f"{where} closed the connection before answering RTSP ({exc.strerror or exc})"
    reply = b""
    while b"\r\n" not in reply:
        if not _wait(sock, deadline, stop, write=False):
            return (
                f"{where} accepted the connection but sent no RTSP answer within the "
                f"{timeout_s:g} s open timeout (a hung camera, or not an RTSP server)"
            )
        try:
            chunk = sock.recv(_MAX_REPLY)
        except OSError as exc:
            return f"{where} dropped the connection during RTSP DESCRIBE ({exc.strerror or exc})"
        if not chunk:
            return f"{where} closed the connection without an RTSP answer"
        reply += chunk
        if len(reply) > _MAX_REPLY:
            break
    status = reply.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
    if len(status) < 2 or not status[0].startswith("RTSP/") or not status[1].isdigit():
        return f"{where} did not answer as an RTSP server (it said {reply[:40]!r})"
    code, reason = int(status[1]), (status[2] if len(status) > 2 else "").strip()
    path = parts.path or "/"
    if code == 404:
        return (
            f"the camera at {where} has no stream at path {path!r} (RTSP 404 {reason}); "
            "check the URL's path in the camera's manual or web page"
        )
    if code == 401:
        if parts.username is not None:
            return None  # OpenCV answers the camera's challenge with the URL's credentials
        return (
            f"the camera at {where} wants a user name and password (RTSP 401 {reason}); "
            "put them in the URL: rtsp://user:password@host/path"
        )
    if code >= 400:
        return f"the camera at {where} refused the stream {path!r}: RTSP {code} {reason}"
    return None
