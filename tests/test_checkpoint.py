"""State files: ``save_state`` writes atomically (into folders it creates), and
``load_state`` names the file for content that is no saved state."""

from __future__ import annotations

import os

import pytest

from edgeload import StateError, load_state, save_state


def test_save_state_creates_missing_folders(tmp_path):
    path = tmp_path / "ckpt" / "run1" / "loader.json"
    save_state({"version": 1, "epoch": 2}, path)
    assert load_state(path) == {"version": 1, "epoch": 2}
    assert os.listdir(path.parent) == ["loader.json"]  # no temp file left
    save_state({"version": 1, "epoch": 3}, path)  # and replaces it in place
    assert load_state(path)["epoch"] == 3


def test_save_state_relative_path_into_a_new_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    save_state({"version": 1}, "ckpt/loader.json")
    assert load_state("ckpt/loader.json") == {"version": 1}


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"\xff\xfe{\x00}\x00", r"byte 0 is not UTF-8"),
        (b"{'version': 1}", r"not JSON"),
        (b"", r"not JSON"),
        (b"[1, 2]", r"holds a JSON list, not a saved state"),
    ],
)
def test_load_state_names_the_file_for_what_is_no_state(tmp_path, content, says):
    path = tmp_path / "loader.json"
    path.write_bytes(content)
    with pytest.raises(StateError, match=says) as info:
        load_state(path)
    assert str(path) in str(info.value)
    assert "start from the beginning" in str(info.value)
    assert isinstance(info.value, ValueError)  # as before: except ValueError still works


def test_load_state_of_a_folder_names_it(tmp_path):
    with pytest.raises(StateError, match=f"{tmp_path} is a directory"):
        load_state(tmp_path)


def test_a_missing_state_file_stays_a_file_not_found_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_state(tmp_path / "nothing.json")
