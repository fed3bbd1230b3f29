"""A ``/dev/videoN`` node whose ioctls this test process answers: :class:`FuseDevice`.

It stands in for a V4L2 camera that another program is capturing from.  Such a camera
opens fine; its driver answers EBUSY only when a second file handle asks for the buffer
queue (``VIDIOC_REQBUFS``).  No V4L2 driver can be loaded here (CI's VMs have no kernel
modules, so no ``vivid``), but ``/dev/fuse`` exists, so the node is a one-file FUSE file
system served from a thread over the raw ``/dev/fuse`` protocol (no libfuse), with that
file bind-mounted onto a regular file at ``/dev/videoN``.  An ioctl on a FUSE file runs
in the kernel's restricted mode: it copies in and out the size the command number
encodes, so ``VIDIOC_REQBUFS`` arrives with its 20-byte struct as a real driver gets it.

``busy=True`` answers ``VIDIOC_REQBUFS`` with EBUSY, as a held camera does; every other
ioctl, and every ioctl with ``busy=False``, gets ENOTTY, as a node that is not V4L2 does.

Needs root (mount) and ``/dev/fuse``; :meth:`FuseDevice.start` raises
:class:`Unavailable` when either is missing or the mount is refused, for the test to
skip.  The protocol structs follow ``include/uapi/linux/fuse.h`` at minor 31, the
minor announced in INIT; the kernel speaks the older minor to us.
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import stat
import struct
import tempfile
import threading
from typing import Callable

FUSE_MAJOR, FUSE_MINOR = 7, 31
POLL_S = 0.05  # the serving thread checks its stop event this often
JOIN_S = 5.0
_BUFFER = 128 * 1024  # > FUSE_MIN_READ_BUFFER (8 KiB) and max_write plus headers

# opcodes (enum fuse_opcode)
LOOKUP, FORGET, GETATTR, OPEN, RELEASE, FLUSH, INIT = 1, 2, 3, 14, 18, 25, 26
INTERRUPT, DESTROY, IOCTL, BATCH_FORGET = 36, 38, 39, 42
_NO_REPLY = (FORGET, INTERRUPT, BATCH_FORGET)

# struct fuse_in_header: u32 len, u32 opcode, u64 unique, u64 nodeid, u32 uid, u32 gid,
# u32 pid, u16 total_extlen, u16 padding (40 bytes)
IN_HEADER = struct.Struct("<IIQQIIIHH")
# struct fuse_out_header: u32 len, s32 error, u64 unique (16 bytes)
OUT_HEADER = struct.Struct("<IiQ")
# struct fuse_init_out: u32 major, minor, max_readahead, flags; u16 max_background,
# congestion_threshold; u32 max_write, time_gran; u16 max_pages, map_alignment;
# u32 flags2, unused[7] (64 bytes)
INIT_OUT = struct.Struct("<IIIIHHIIHHI28x")
# struct fuse_init_in starts with u32 major, minor, max_readahead, flags
INIT_IN = struct.Struct("<IIII")
# struct fuse_attr: u64 ino, size, blocks, atime, mtime, ctime; u32 atimensec,
# mtimensec, ctimensec, mode, nlink, uid, gid, rdev, blksize, flags (88 bytes)
ATTR = struct.Struct("<6Q10I")
# struct fuse_entry_out: u64 nodeid, generation, entry_valid, attr_valid; u32
# entry_valid_nsec, attr_valid_nsec; struct fuse_attr (128 bytes)
ENTRY_OUT_HEAD = struct.Struct("<4Q2I")
# struct fuse_attr_out: u64 attr_valid; u32 attr_valid_nsec, dummy; struct fuse_attr
# (104 bytes)
ATTR_OUT_HEAD = struct.Struct("<QII")
# struct fuse_open_out: u64 fh; u32 open_flags, padding (16 bytes)
OPEN_OUT = struct.Struct("<QII")
# struct fuse_ioctl_in: u64 fh; u32 flags, cmd; u64 arg; u32 in_size, out_size (32 bytes)
IOCTL_IN = struct.Struct("<QIIQII")

ROOT_ID, FILE_ID, FILE_NAME = 1, 2, b"video"
# _IOWR('V', 8, struct v4l2_requestbuffers), the struct being 20 bytes
VIDIOC_REQBUFS = (3 << 30) | (20 << 16) | (ord("V") << 8) | 8

MS_NOSUID, MS_NODEV, MS_BIND = 2, 4, 4096
MNT_DETACH = 2


class Unavailable(Exception):
    """FUSE or mounting is not possible here (not root, no /dev/fuse, mount refused)."""


def _libc_call(name: str) -> Callable[..., int]:
    libc = ctypes.CDLL(None, use_errno=True)
    return getattr(libc, name)  # type: ignore[no-any-return]


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    mount = _libc_call("mount")
    args = (
        source.encode(),
        target.encode(),
        None if fstype is None else fstype.encode(),
        ctypes.c_ulong(flags),
        None if data is None else data.encode(),
    )
    if mount(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def _umount(target: str) -> None:
    if _libc_call("umount2")(target.encode(), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOENT):  # not mounted (any more)
            raise OSError(err, f"umount {target}: {os.strerror(err)}")


def _attr(nodeid: int) -> bytes:
    if nodeid == ROOT_ID:
        mode, nlink = stat.S_IFDIR | 0o755, 2
    else:
        mode, nlink = stat.S_IFREG | 0o666, 1  # regular: a char-device mode would bypass us
    return ATTR.pack(nodeid, 0, 0, 0, 0, 0, 0, 0, 0, mode, nlink, 0, 0, 0, 4096, 0)


def free_video_path() -> str:
    """A ``/dev/videoN`` path nothing occupies (numbers far above real cameras')."""
    for number in range(900, 1000):
        path = f"/dev/video{number}"
        if not os.path.lexists(path):
            return path
    raise Unavailable("no free /dev/videoN between 900 and 999")


class FuseDevice:
    """A FUSE file bind-mounted at ``path`` (a ``/dev/videoN``); see the module docstring.

    Use as a context manager; on exit both mounts are detached, ``path`` is removed,
    ``/dev/fuse`` is closed and the serving thread has ended (or ``close`` raises).
    """

    def __init__(self, path: str, *, busy: bool) -> None:
        self.path = path
        self.busy = busy
        self.ioctls: list[int] = []  # the commands received, in order
        self._fd = -1
        self._mountpoint = ""
        self._mounted: list[str] = []
        self._created = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None  # what ended the serving thread early

    def __enter__(self) -> FuseDevice:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Mount the file system and bind its file at ``path``; Unavailable if not here."""
        if os.geteuid() != 0:
            raise Unavailable("mounting FUSE needs root")
        if not os.path.exists("/dev/fuse"):
            raise Unavailable("no /dev/fuse")
        try:
            self._fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
        except OSError as exc:
            raise Unavailable(f"cannot open /dev/fuse: {exc}") from exc
        try:
            self._mountpoint = tempfile.mkdtemp(prefix="edgeload-fuse-")
            options = f"fd={self._fd},rootmode=40000,user_id=0,group_id=0"
            try:
                _mount("edgeload-test", self._mountpoint, "fuse", MS_NOSUID | MS_NODEV, options)
            except OSError as exc:
                raise Unavailable(str(exc)) from exc
            self._mounted.append(self._mountpoint)
            self._thread = threading.Thread(target=self._serve, name="fuse-device", daemon=True)
            self._thread.start()
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            self._created = True
            source = os.path.join(self._mountpoint, FILE_NAME.decode())
            try:
                _mount(source, self.path, None, MS_BIND, None)
            except OSError as exc:
                raise Unavailable(str(exc)) from exc
            self._mounted.append(self.path)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Detach both mounts, remove ``path``, end the thread and close ``/dev/fuse``."""
        for target in reversed(self._mounted):
            _umount(target)
        self._mounted.clear()
        if self._created:
            os.unlink(self.path)
            self._created = False
        if self._mountpoint:
            os.rmdir(self._mountpoint)
            self._mountpoint = ""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(JOIN_S)
            if self._thread.is_alive():
                raise RuntimeError(f"the FUSE serving thread did not end within {JOIN_S} s")
            self._thread = None
        if self._fd >= 0:  # closing it aborts the connection: nothing waits on us after
            os.close(self._fd)
            self._fd = -1

    def _serve(self) -> None:
        try:
            while not self._stop.is_set():
                if not select.select([self._fd], [], [], POLL_S)[0]:
                    continue
                try:
                    request = os.read(self._fd, _BUFFER)
                except OSError as exc:
                    if exc.errno in (errno.ENOENT, errno.EINTR, errno.EAGAIN):
                        continue  # the request was interrupted before we read it
                    if exc.errno == errno.ENODEV:
                        return  # unmounted: the connection is gone
                    raise
                self._answer(request)
        except BaseException as exc:  # kept for the test to report
            self.error = exc

    def _answer(self, request: bytes) -> None:
        length, opcode, unique, nodeid = IN_HEADER.unpack_from(request)[:4]
        body = request[IN_HEADER.size : length]
        if opcode in _NO_REPLY:
            return
        try:
            error, payload = self._handle(opcode, nodeid, body)
        except Exception:  # a caller must never wait for ever
            error, payload = -errno.EIO, b""
        reply = OUT_HEADER.pack(OUT_HEADER.size + len(payload), error, unique) + payload
        try:
            os.write(self._fd, reply)
        except OSError as exc:
            if exc.errno != errno.ENOENT:  # ENOENT: the caller gave up (interrupted)
                raise
        if opcode == DESTROY:
            self._stop.set()

    def _handle(self, opcode: int, nodeid: int, body: bytes) -> tuple[int, bytes]:
        if opcode == INIT:
            major, _, readahead, _ = INIT_IN.unpack_from(body)
            if major != FUSE_MAJOR:
                return -errno.EPROTO, b""
            return 0, INIT_OUT.pack(FUSE_MAJOR, FUSE_MINOR, readahead, 0, 16, 12, 4096, 1, 0, 0, 0)
        if opcode == LOOKUP:
            if nodeid != ROOT_ID or body.rstrip(b"\0") != FILE_NAME:
                return -errno.ENOENT, b""
            return 0, ENTRY_OUT_HEAD.pack(FILE_ID, 0, 1, 1, 0, 0) + _attr(FILE_ID)
        if opcode == GETATTR:
            return 0, ATTR_OUT_HEAD.pack(1, 0, 0) + _attr(nodeid)
        if opcode == OPEN:
            return 0, OPEN_OUT.pack(nodeid, 0, 0)
        if opcode in (FLUSH, RELEASE, DESTROY):
            return 0, b""
        if opcode == IOCTL:
            cmd = IOCTL_IN.unpack_from(body)[2]
            self.ioctls.append(cmd)
            if self.busy and cmd == VIDIOC_REQBUFS:
                return -errno.EBUSY, b""
            return -errno.ENOTTY, b""
        return -errno.ENOSYS, b""
