"""FFmpeg's and OpenCV's own log lines during edgeload's opens: kept for the stream, not
sprayed on stderr (:func:`open_log`).

OpenCV's ``isOpened() == False`` says nothing about why.  The cause is in FFmpeg's log
(``[http @ 0x...] HTTP error 404 Not Found``, ``method SETUP failed: 461``), and OpenCV
sets FFmpeg's level to errors only, so a warning such as the 404 is not even printed.
While a reader thread opens a capture, :func:`open_log` collects what FFmpeg logs *from
that thread* at warning level or worse; the reader appends it to the stream's error
(``stats()``, :class:`~edgeload.errors.SourceError`), passwords hidden.

**How FFmpeg's lines are caught.**  Through FFmpeg's own log hook
(``av_log_set_callback``), called through ``ctypes`` on the ``libavutil`` this process's
OpenCV loaded (found in ``/proc/self/maps``).  The hook is installed only while at
least one edgeload open is in progress and put back to FFmpeg's default callback when
the last one ends: FFmpeg calls the hook for every message, debug ones included (several
per decoded frame), and each call into Python takes the GIL.  A line is the stream's
when the thread logging it is a reader inside its open, so 16 cameras opening at once
each get their own lines.  Every other call (another thread, the user's own captures,
debug levels) goes on to FFmpeg's default callback with its arguments untouched, so it
prints exactly what it printed before.  At exit the default callback is put back before
Python finalises, so no FFmpeg thread calls into a finished interpreter.

It works with OpenCV 4.5.4, 4.6 (Debian, system FFmpeg), 4.9 and 5.x (pip wheels,
bundled FFmpeg).  Without it, FFmpeg logs as before and the error says only "could not
open": on an OpenCV with no FFmpeg, or FFmpeg linked statically; outside Linux; when
several unrelated ``libavutil`` copies are loaded (PyAV beside a system OpenCV), so the
right one is not known; and when ``OPENCV_FFMPEG_DEBUG`` or ``OPENCV_FFMPEG_LOGLEVEL``
is set, since the user then asked for OpenCV's own FFmpeg log (OpenCV reads these once,
at its first FFmpeg open, and prints that log on stdout).

**OpenCV's own lines** (``[ WARN:0@1.2] global cap.cpp:212 open VIDEOIO(FFMPEG): backend
is generally available but can't be used to capture by name``) are written by C++ to
file descriptor 2 and carry no thread, and OpenCV's Python bindings cannot replace its
log writer.  The only way to catch them would be to point fd 2 at a pipe around each
open, and that is not done, because of what it risks in a process that runs for months:
a crash while fd 2 points at the pipe (a fault handler's traceback, a C++ ``terminate``
or glibc abort message) loses its last words; any child process started meanwhile (a
worker, the user's ``subprocess``) inherits the pipe as its stderr and blocks or dies on
SIGPIPE once the pipe goes; and with several opens at once a line could not be given
to the right stream.  For an FFmpeg open those lines only repeat that it failed, so
they are silenced instead: while an FFmpeg open is in progress OpenCV's level is
lowered from its default (warnings) to errors, and put back when the last such open
ends.  This is process wide: an OpenCV warning from the user's own code in that window
is not printed either.  It is not done when the user chose a level
(``OPENCV_LOG_LEVEL`` set, or a level other than the default), nor for GStreamer
opens, whose OpenCV warnings carry GStreamer's cause (``module souphttpsrc0 reported:
Not Found``) and still reach stderr.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import logging
import os
import re
import threading
from collections.abc import Iterator
from typing import Any

_log = logging.getLogger("edgeload")

AV_LOG_WARNING = 24  # FFmpeg's level numbers: lower is more severe
_MAX_LINES = 8  # per open; a failing open logs a few lines, a flood is cut here
_LINE_BYTES = 1024
_USER_FFMPEG_LOG_VARS = ("OPENCV_FFMPEG_DEBUG", "OPENCV_FFMPEG_LOGLEVEL")
_OPENCV_LEVEL_VAR = "OPENCV_LOG_LEVEL"
_CV_WARNING, _CV_ERROR = 3, 2  # cv::utils::logging::LogLevel
# "[http @ 0x55d0c0ffee00] HTTP error 404" -> "http: HTTP error 404": the address is noise
_CONTEXT = re.compile(r"\[([\w.-]+) @ (?:0x)?[0-9a-fA-F]+\] ")

# (context, level, format, va_list): the format stays a raw pointer, so a call passed on
# to FFmpeg's default callback gets FFmpeg's own arguments back unchanged.
_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)

_lock = threading.Lock()
# The lines of each thread whose open is in progress, by thread ident.  The hook reads
# it without the lock: one dict lookup under the GIL.
_opening: dict[int, list[str]] = {}
_quieting = 0  # FFmpeg opens in progress with OpenCV's level lowered
_level_before: int | None = None
_exiting = False


class _FFmpegHook:
    """FFmpeg's log callback pointed at :func:`_on_log`, or back at FFmpeg's default."""

    def __init__(self, lib: Any) -> None:
        self._set = lib.av_log_set_callback
        self._set.argtypes = [_CALLBACK]
        self._set.restype = None
        self._format = lib.av_log_format_line
        self._format.argtypes = [
            ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
            ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int),
        ]  # fmt: skip
        self._format.restype = None
        self.default = _CALLBACK(("av_log_default_callback", lib))
        # Kept for the life of the process: FFmpeg may still hold the pointer.
        self.ours = _CALLBACK(self._on_log)
        self.installed = False

    def install(self) -> None:
        self._set(self.ours)
        self.installed = True

    def uninstall(self) -> None:
        self._set(self.default)
        self.installed = False

    def _on_log(self, ptr: int | None, level: int, fmt: int | None, args: int | None) -> None:
        # Called by FFmpeg from any thread; an exception here would print on stderr.
        try:
            lines = _opening.get(threading.get_ident())
            if lines is None or level > AV_LOG_WARNING or _exiting:
                self.default(ptr, level, fmt, args)
                return
            buf = ctypes.create_string_buffer(_LINE_BYTES)
            prefix = ctypes.c_int(1)
            self._format(ptr, level, fmt, args, buf, _LINE_BYTES, ctypes.byref(prefix))
            _keep(lines, buf.value.decode("utf-8", "replace"))
        except Exception:
            return


def _keep(lines: list[str], text: str) -> None:
    """Add FFmpeg's text to ``lines``; a message may come in parts without a newline."""
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += text
    elif len(lines) < _MAX_LINES:
        lines.append(text)


_hook: _FFmpegHook | None = None
_hook_looked = False  # a libavutil was found (or found unusable): do not look again


def _libavutil() -> str | None:
    """The path of the ``libavutil`` OpenCV loaded, when this process shows exactly one."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            paths = {line.split()[-1] for line in maps if "/libavutil" in line}
    except OSError:
        return None
    # A pip wheel's own copy sits in opencv_python*.libs; another package's (PyAV's
    # av.libs) is not OpenCV's.
    bundled = [p for p in paths if "opencv" in os.path.dirname(p).lower()]
    if bundled:
        paths = set(bundled)
    return next(iter(paths)) if len(paths) == 1 else None


def _find_hook() -> _FFmpegHook | None:
    """The FFmpeg log hook, or None where it cannot be had (see the module docstring).

    Looked up again at each open until a libavutil is mapped: OpenCV builds with the
    FFmpeg backend as a plugin load it at their first FFmpeg open.
    """
    global _hook, _hook_looked
    if _hook_looked or any(os.environ.get(v) for v in _USER_FFMPEG_LOG_VARS):
        return _hook
    path = _libavutil()
    if path is None:
        return None
    _hook_looked = True
    try:
        _hook = _FFmpegHook(ctypes.CDLL(path))
    except (OSError, AttributeError) as exc:  # not loadable, or a symbol missing
        _log.debug("edgeload: FFmpeg's log cannot be captured (%s): %s", path, exc)
    return _hook


def _opencv_log_level() -> tuple[Any, Any] | None:
    """OpenCV's (get, set) log level functions: ``cv2.utils.logging`` (5.x) or ``cv2``."""
    import cv2

    logging_module = getattr(getattr(cv2, "utils", None), "logging", None)
    for where in (logging_module, cv2):
        get, put = getattr(where, "getLogLevel", None), getattr(where, "setLogLevel", None)
        if callable(get) and callable(put):
            return get, put
    return None


def _quiet_opencv() -> None:
    """Lower OpenCV's level to errors for an FFmpeg open (under ``_lock``)."""
    global _quieting, _level_before
    _quieting += 1
    if _quieting > 1 or os.environ.get(_OPENCV_LEVEL_VAR):
        return
    levels = _opencv_log_level()
    if levels is None:
        return
    get, put = levels
    try:
        if int(get()) == _CV_WARNING:  # OpenCV's default: the user chose nothing else
            put(_CV_ERROR)
            _level_before = _CV_WARNING
    except Exception:  # a build whose binding misbehaves: leave its level alone
        _level_before = None


def _restore_opencv() -> None:
    """The last FFmpeg open ended: put OpenCV's level back (under ``_lock``)."""
    global _quieting, _level_before
    _quieting -= 1
    if _quieting or _level_before is None:
        return
    before, _level_before = _level_before, None
    levels = _opencv_log_level()
    if levels is None:
        return
    get, put = levels
    with contextlib.suppress(Exception):
        if int(get()) == _CV_ERROR:  # still ours: the user did not set one meanwhile
            put(before)


@contextlib.contextmanager
def open_log(*, ffmpeg: bool) -> Iterator[list[str]]:
    """Collect FFmpeg's warnings and errors logged by this thread during the block.

    Yields the list the lines arrive in (raw, passwords not yet hidden); empty where
    FFmpeg's log cannot be captured.  Nested blocks in one thread share the outer list.

    Args:
        ffmpeg: the block opens an FFmpeg capture, so OpenCV's own warnings are silenced
            meanwhile (see the module docstring).
    """
    ident = threading.get_ident()
    with _lock:
        outer = _opening.get(ident)
        if outer is None:
            hook = None if _exiting else _find_hook()
            if hook is not None and not hook.installed:
                hook.install()
            lines: list[str] = []
            _opening[ident] = lines
            if ffmpeg:
                _quiet_opencv()
    if outer is not None:
        yield outer
        return
    try:
        yield lines
    finally:
        with _lock:
            del _opening[ident]
            if ffmpeg:
                _restore_opencv()
            if not _opening and _hook is not None and _hook.installed:
                _hook.uninstall()


def summary(lines: list[str]) -> str:
    """FFmpeg's lines as one clause: ``http: HTTP error 404 Not Found; ...``."""
    seen: list[str] = []
    for line in lines:
        text = _CONTEXT.sub(lambda m: f"{m.group(1)}: ", line.strip())
        if text and text not in seen:
            seen.append(text)
    return "; ".join(seen)


@atexit.register
def _at_exit() -> None:
    # FFmpeg threads that outlive the interpreter must not call into it.
    global _exiting
    with _lock:
        _exiting = True
        if _hook is not None and _hook.installed:
            _hook.uninstall()
