"""A camera's password never reaches what edgeload shows.

A password is planted in the URL's user info and in a ``?password=`` query, and every
output is swept for it: exceptions raised (their text, chain and traceback), log
records, ``stats()`` as JSON, ``repr()``, and the command line's stdout and stderr.
Only the opening code sees the real URL.
"""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import time
import traceback

import pytest

import edgeload as el
from edgeload.errors import ArgumentError, EdgeloadError, SourceError

SECRET = "S3cretPw"


@pytest.fixture()
def closed_port():
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(params=["userinfo", "query"])
def url(request, closed_port):
    if request.param == "userinfo":
        return f"rtsp://admin:{SECRET}@127.0.0.1:{closed_port}/cam"
    return f"rtsp://127.0.0.1:{closed_port}/cam?user=admin&password={SECRET}"


def _exception_text(exc: BaseException) -> str:
    parts = ["".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), repr(exc)]
    seen = exc
    while seen is not None:
        parts += [str(seen), repr(seen.args), repr(vars(seen))]
        seen = seen.__cause__ or seen.__context__
    return "\n".join(parts)


def _records_text(caplog) -> str:
    return "\n".join(record.getMessage() + (record.exc_text or "") for record in caplog.records)


def _source(url: str) -> el.VideoSource:
    # Two opens, a moment apart: the stream fails for good within a second or two.
    return el.VideoSource(url, max_retries=1, backoff_s=(0.05, 0.1), open_timeout_s=2.0)


def test_a_failed_camera_raises_logs_and_reports_without_its_password(url, caplog):
    caplog.set_level(logging.DEBUG)
    source = _source(url)
    assert SECRET not in repr(source) and SECRET not in source.name
    with el.StreamLoader([source], size=(64, 48), on_error="raise", timeout_s=60) as loader:
        with pytest.raises(SourceError) as info:
            for _ in loader:
                pass
        stats = json.dumps(loader.stats(), default=str)
    text = _exception_text(info.value)
    assert "127.0.0.1" in text  # the message names the camera ...
    assert SECRET not in text  # ... but not its password
    assert SECRET not in str(info.value.source)
    assert "refused" in stats  # the real cause, found before OpenCV opens it
    assert SECRET not in stats
    assert SECRET not in _records_text(caplog)


def test_continue_logs_the_failure_without_the_password(url, caplog):
    caplog.set_level(logging.DEBUG)
    with el.StreamLoader([_source(url)], size=(64, 48), timeout_s=60) as loader:
        for _ in loader:  # the one stream fails: the loop ends
            pass
        stats = json.dumps(loader.stats(), default=str)
    logged = _records_text(caplog)
    assert "refused" in logged
    assert SECRET not in logged
    assert SECRET not in stats


def test_argument_and_source_errors_hide_the_password(url, closed_port):
    raised = []
    for make in (
        lambda: el.StreamLoader(url),  # a lone string: the hint repeats it
        lambda: el.VideoSource(url, fps=-1),
        lambda: el.VideoSource(url, rtsp_transport="sctp"),
        lambda: el.VideoSource(url, loop=True),
        lambda: el.VideoSource(f"ftp://admin:{SECRET}@127.0.0.1:{closed_port}/cam"),
        lambda: el.StreamLoader([url], size=(64, 48), batch=0),
    ):
        with pytest.raises(EdgeloadError) as info:
            make()
        raised.append(info.value)
    assert {type(e) for e in raised} == {ArgumentError, SourceError}
    for exc in raised:
        assert SECRET not in _exception_text(exc)


def _edgeload(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "edgeload", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_demo_and_probe_never_print_the_password(url):
    started = time.monotonic()
    demo = _edgeload("demo", url, "--seconds", "2", "--size", "64x48")
    # A camera that is down holds the demo about --seconds plus a 2 s grace, not the
    # loader's 60 s batch timeout (the bound is 10x that, for a busy box).
    assert time.monotonic() - started < 45
    assert "127.0.0.1" in demo.stdout  # the table names the stream
    assert SECRET not in demo.stdout + demo.stderr
    probe = _edgeload("probe", "--source", url, "--source", url.replace("rtsp", "ftp"))
    assert probe.returncode == 2  # the ftp:// one cannot be used
    assert "source rtsp://" in probe.stdout and "ftp" in probe.stderr
    assert SECRET not in probe.stdout + probe.stderr
    as_json = _edgeload("probe", "--json", "--source", url)
    assert json.loads(as_json.stdout)["sources"][0]["kind"] == "rtsp"
    assert SECRET not in as_json.stdout + as_json.stderr
