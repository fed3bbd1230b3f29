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

# An HTTP camera whose every GET answers 404 (preflight only connects, so it cannot
# see this); while answering, in the middle of the loader's open, the server thread
# writes its own line to fd 2, as the user's code might.
_CHILD = textwrap.dedent(
    """
    import http.server, json, os, sys, threading, time
    import edgeload as el
    from edgeload.errors import SourceError

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            os.write(2, b"%(user)s\\n")
            self.send_error(404)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = "http://admin:%(secret)s@127.0.0.1:%%d/missing.ts" %% server.server_address[1]
    mode = sys.argv[1]
    source = el.VideoSource(url, backend="ffmpeg", open_timeout_s=10, backoff_s=(0.05, 0.2))
    out = {}
    loader = el.StreamLoader([source], size=(32, 32), deadline_ms=50, timeout_s=60,
                             on_error=mode)
    try:
        with loader:
            deadline = time.monotonic() + 60
            for _ in loader:
                if loader.stats()["streams"][0]["last_error"] or time.monotonic() > deadline:
                    break
            out["last_error"] = loader.stats()["streams"][0]["last_error"]
    except SourceError as exc:
        out["raised"] = str(exc)
    out["threads"] = [t.name for t in threading.enumerate() if t.name.startswith("edgeload-")]
    print(json.dumps(out))
    """
) % {"user": USER_LINE, "secret": SECRET}


def _run_loader(mode: str) -> tuple[dict, str]:
    root = Path(__file__).resolve().parents[2]
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])
    )
    for name in ("OPENCV_FFMPEG_DEBUG", "OPENCV_FFMPEG_LOGLEVEL", "OPENCV_LOG_LEVEL"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, mode],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


@pytest.mark.parametrize("mode", ["continue", "raise"])
def test_ffmpeg_cause_of_a_failed_open_is_in_the_stream_error_not_on_stderr(mode):
    out, stderr = _run_loader(mode)
    error = out["last_error"] if mode == "continue" else out["raised"]
    assert error is not None, out
    # FFmpeg's own words, which OpenCV's "could not open" leaves out
    assert "could not open" in error and "HTTP error 404 Not Found" in error, error
    assert SECRET not in error and "admin:***@" in error
    # ... and not sprayed on stderr, where neither FFmpeg's nor OpenCV's line shows
    assert "404" not in stderr and "HTTP error" not in stderr, stderr
    assert "VIDEOIO" not in stderr and "WARN" not in stderr, stderr
    assert SECRET not in stderr
    # what the rest of the program wrote to fd 2 during the open still got there
    assert USER_LINE in stderr
    assert out["threads"] == []
    if mode == "raise":
        assert out["raised"].startswith("stream 0"), out
