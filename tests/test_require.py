"""The switches that turn a missing real component from a skip into a failure."""

from __future__ import annotations

import pytest
from _require import missing, required


@pytest.mark.parametrize("name", ["FFMPEG", "GSTREAMER", "RTSP"])
def test_ci_requires_the_real_media_components(monkeypatch, name):
    monkeypatch.delenv(f"EDGELOAD_REQUIRE_{name}", raising=False)
    monkeypatch.delenv("CI", raising=False)
    assert not required(name)
    monkeypatch.setenv("CI", "true")
    assert required(name)
    monkeypatch.setenv(f"EDGELOAD_REQUIRE_{name}", "0")  # an explicit switch wins
    assert not required(name)


def test_ci_does_not_require_a_gpu(monkeypatch):
    monkeypatch.setenv("CI", "true")
    monkeypatch.delenv("EDGELOAD_REQUIRE_CUDA", raising=False)
    assert not required("CUDA")


def test_missing_fails_when_required_and_skips_otherwise(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("EDGELOAD_REQUIRE_FFMPEG", "1")
    with pytest.raises(pytest.fail.Exception, match=r"EDGELOAD_REQUIRE_FFMPEG.*no ffmpeg"):
        missing("FFMPEG", "no ffmpeg")
    monkeypatch.setenv("EDGELOAD_REQUIRE_FFMPEG", "0")
    with pytest.raises(pytest.skip.Exception, match="no ffmpeg"):
        missing("FFMPEG", "no ffmpeg")
