"""Credentials never reach what edgeload shows: ``errors.redact``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgeload.errors import redact


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("rtsp://admin:Secret@10.0.0.2:554/cam", "rtsp://admin:***@10.0.0.2:554/cam"),
        ("rtsp://admin:p@ss@host/x", "rtsp://admin:***@host/x"),
        ("https://tok3n@host/clip.ts", "https://***@host/clip.ts"),
        ("could not open 'rtsp://u:pw@h/a'", "could not open 'rtsp://u:***@h/a'"),
        ("http://h/live?user=u&password=abc&res=1", "http://h/live?user=u&password=***&res=1"),
        ("http://h/live?TOKEN=abc#frag", "http://h/live?TOKEN=***#frag"),
        ("rtsp://host/cam", "rtsp://host/cam"),
        ("/dev/video0", "/dev/video0"),
        ("write to a@b.example", "write to a@b.example"),
        (3, "3"),
    ],
)
def test_redact_hides_passwords_and_keeps_the_rest(text, shown):
    assert redact(text) == shown


_secret = st.text(
    alphabet=st.characters(
        min_codepoint=33, max_codepoint=126, blacklist_characters="/?#@'\"<>\\:"
    ),
    min_size=4,
    max_size=24,
)


@given(user=st.from_regex(r"[a-z]{1,8}", fullmatch=True), password=_secret)
def test_no_password_survives_in_a_url_or_a_message_around_it(user, password):
    url = f"rtsp://{user}:{password}@cam.local:554/stream1"
    for text in (url, f"video source {url!r}: could not open", f"[{url}]"):
        assert redact(text) == text.replace(f"{user}:{password}@", f"{user}:***@")
