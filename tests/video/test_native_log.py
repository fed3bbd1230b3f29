"""FFmpeg's own lines about a stream that will not open end up in that stream's error,
not on the process's stderr; everything else written to stderr meanwhile still gets there.

The loader runs in a child process so its real file descriptor 2 can be read: FFmpeg
writes from C, past Python's ``sys.stderr``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("cv2")

SECRET = "S3cretPw"
USER_LINE = "user-line-written-during-the-open"

# An HTTP camera that answers 404 for /missing.ts and 403 for anything else (preflight
# only connects, so it cannot see this); while answering, in the middle of the loader's
# open, the server thread writes its own line to fd 2, as the user's code might.
_CHILD = textwrap.dedent(
    """
    import http.server, json, os, sys, threading, time
    import cv2
    import edgeload as el
    from edgeload.errors import SourceError

    class Refusing(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            os.write(2, b"%(user)s\\n")
            if self.path == "/leaky.ts":  # FFmpeg repeats the reason, password and all
                self.send_error(404, "moved to rtsp://admin:%(secret)s@10.0.0.9/cam")
            else:
                self.send_error(404 if self.path == "/missing.ts" else 403)

        def log_message(self, *args):
            pass

    def level():  # None where this OpenCV's Python has no log level (4.5.1)
        for where in (getattr(getattr(cv2, "utils", None), "logging", None), cv2):
            if hasattr(where, "getLogLevel"):
                return int(where.getLogLevel())
        return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = "http://admin:%(secret)s@127.0.0.1:%%d" %% server.server_address[1]
    mode, paths = sys.argv[1], sys.argv[2:]
    sources = [el.VideoSource(base + path, backend="ffmpeg", open_timeout_s=10,
                              backoff_s=(0.05, 0.2)) for path in paths]
    out = {"level_before": level()}
    loader = el.StreamLoader(sources, size=(32, 32), deadline_ms=50, timeout_s=60,
                             on_error=mode)
    def errors():
        return [s["last_error"] for s in loader.stats()["streams"]]
    try:
        with loader:
            deadline = time.monotonic() + 60
            for _ in loader:
                if all(errors()) or time.monotonic() > deadline:
                    break
            out["errors"] = errors()
    except SourceError as exc:
        out["raised"] = str(exc)
    out["level_after"] = level()
    out["threads"] = [t.name for t in threading.enumerate() if t.name.startswith("edgeload-")]
    print("RESULT " + json.dumps(out), flush=True)
    """
) % {"user": USER_LINE, "secret": SECRET}


def _run_loader(mode: str, *paths: str, env: dict[str, str] | None = None) -> tuple[dict, str]:
    root = Path(__file__).resolve().parents[2]
    pythonpath = os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])
    child_env = dict(os.environ, PYTHONPATH=pythonpath)
    for name in ("OPENCV_FFMPEG_DEBUG", "OPENCV_FFMPEG_LOGLEVEL", "OPENCV_LOG_LEVEL"):
        child_env.pop(name, None)
    child_env.update(env or {})
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, mode, *paths],
        capture_output=True, text=True, timeout=120, env=child_env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # OpenCV prints FFmpeg's log on stdout when the user asked for it: the result is
    # the line with its marker, wherever OpenCV's lines fall.
    results = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert results, f"no result line in the child's stdout: {done.stdout!r}"
    return json.loads(results[-1][len("RESULT ") :]), done.stderr


@pytest.mark.parametrize("mode", ["continue", "raise"])
def test_ffmpeg_cause_of_a_failed_open_is_in_the_stream_error_not_on_stderr(mode):
    out, stderr = _run_loader(mode, "/missing.ts")
    error = out["errors"][0] if mode == "continue" else out["raised"]
    assert error is not None, out
    # FFmpeg's own words, which OpenCV's "could not open" leaves out
    assert "could not open" in error and "HTTP error 404 Not Found" in error, error
    assert SECRET not in error and "admin:***@" in error
    # ... and not sprayed on stderr, where neither FFmpeg's nor OpenCV's line shows
    assert "404 Not Found" not in stderr and "HTTP error" not in stderr, stderr
    assert "VIDEOIO" not in stderr and "WARN" not in stderr, stderr
    assert SECRET not in stderr
    # what the rest of the program wrote to fd 2 during the open still got there
    assert USER_LINE in stderr
    assert out["threads"] == []
    if mode == "raise":
        assert out["raised"].startswith("stream 0"), out
    assert out["level_after"] == out["level_before"]  # OpenCV's log level is put back


def test_concurrent_opens_each_get_their_own_ffmpeg_lines():
    out, stderr = _run_loader("continue", "/missing.ts", "/forbidden.ts", "/missing.ts")
    missing, forbidden, missing_too = out["errors"]
    # "HTTP error 40x", not the bare number: the server's port may hold "404"
    for error in (missing, missing_too):
        assert "HTTP error 404" in error and "HTTP error 403" not in error, out
    assert "HTTP error 403 Forbidden" in forbidden and "HTTP error 404" not in forbidden, out
    assert "HTTP error" not in stderr, stderr


def test_a_password_in_ffmpegs_lines_is_hidden():
    out, stderr = _run_loader("continue", "/leaky.ts")
    error = out["errors"][0]
    assert "HTTP error 404 moved to rtsp://admin:***@10.0.0.9/cam" in error, error
    assert SECRET not in error and SECRET not in stderr


def test_a_user_who_asked_for_opencvs_ffmpeg_log_keeps_it():
    # OPENCV_FFMPEG_LOGLEVEL: OpenCV's own FFmpeg log (on stdout) is the user's choice,
    # so edgeload leaves FFmpeg's callback alone and the error is OpenCV's bare one.
    out, _ = _run_loader("continue", "/missing.ts", env={"OPENCV_FFMPEG_LOGLEVEL": "24"})
    error = out["errors"][0]
    assert "could not open" in error and "FFmpeg:" not in error, error
    assert SECRET not in error
    assert out["threads"] == []
