"""Profiles: every shipped file loads, bad values are named, precedence holds."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from edgeload.errors import ArgumentError, ProfileError
from edgeload.platform.probe import probe
from edgeload.platform.profile import (
    PROFILE_ENV,
    Profile,
    load_profile,
    platform_files,
    read_profile_file,
    validate_settings,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "platforms"
REPO = Path(__file__).resolve().parents[2]

# fixture tree -> the platform file that must match it
EXPECTED_FILE = {
    "jetson-nano": "platforms/jetson-t210.toml",
    "jetson-tx2": "platforms/jetson-t186.toml",
    "jetson-xavier-nx": "platforms/jetson-t194.toml",
    "jetson-agx-orin": "platforms/jetson-t234.toml",
    "jetson-orin-nano": "platforms/jetson-t234.toml",
    "rpi4": "platforms/rpi4.toml",
    "rpi-zero-2w": "platforms/rpi3-zero2.toml",
    "x86-desktop": "platforms/generic-x86.toml",
}


def test_every_platform_file_loads_and_is_valid():
    names = [name for name, _ in platform_files()]
    assert len(names) >= 8
    for _, path in platform_files():
        match, settings, _, _ = read_profile_file(path)
        assert match, f"{path} matches nothing"
        assert settings, f"{path} sets nothing"


@pytest.mark.parametrize("board", sorted(EXPECTED_FILE))
def test_fixture_board_matches_its_platform_file(board):
    profile = load_profile(probe(FIXTURES / board), tuned=None)
    assert profile.source == f"built-in < {EXPECTED_FILE[board]}"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("prefetch_fraction", 1.5, r"prefetch_fraction must be between 0 and 1, got 1\.5"),
        ("worker_kind", "fibers", r"worker_kind must be one of auto, thread, process"),
        ("num_workers", 0, r"num_workers must be 1\.\.256 or one of cores"),
        ("memory_mode", "zero", r"memory_mode must be one of auto, host, pinned, mapped, managed"),
        ("thread_budget", -2, r"thread_budget must be 1\.\.1024 or 'auto'"),
        ("prefetch_min_bytes", "1MB", r"prefetch_min_bytes must be a whole number of bytes"),
    ],
)
def test_bad_value_names_file_key_value_and_range(tmp_path, key, value, message):
    path = tmp_path / "rpi9.toml"
    literal = f'"{value}"' if isinstance(value, str) else str(value)
    path.write_text(f'[match]\nfamily = "raspberry_pi"\n\n[profile]\n{key} = {literal}\n')
    with pytest.raises(ProfileError, match=message) as info:
        read_profile_file(path)
    assert str(path) in str(info.value)
    assert isinstance(info.value, ValueError)


def test_unknown_key_and_unparsable_file_are_profile_errors(tmp_path):
    typo = tmp_path / "typo.toml"
    typo.write_text("[profile]\nnum_worker = 2\n")
    with pytest.raises(ProfileError, match=r"unknown key 'num_worker'; known keys: .*num_workers"):
        read_profile_file(typo)
    broken = tmp_path / "broken.toml"
    broken.write_text("[profile\n")
    with pytest.raises(ProfileError, match=r"broken\.toml: cannot read profile"):
        read_profile_file(broken)


def test_min_above_max_is_rejected():
    with pytest.raises(ProfileError, match=r"prefetch_min_bytes .* is above prefetch_max_bytes"):
        validate_settings({"prefetch_min_bytes": 10, "prefetch_max_bytes": 5}, where="arguments")


def _write_tuned(path: Path, *, model: str, **settings: object) -> Path:
    body = "\n".join(f"{k} = {v!r}".replace("'", '"') for k, v in settings.items())
    path.write_text(f'[tuned]\nmodel = "{model}"\n\n[profile]\n{body}\n')
    return path


def test_precedence_builtin_platform_tuned_arguments(tmp_path, monkeypatch):
    board = probe(FIXTURES / "jetson-agx-orin")
    tuned = _write_tuned(
        tmp_path / "profile.toml", model=board.model, num_workers=3, prefetch_fraction=0.2
    )
    monkeypatch.setenv(PROFILE_ENV, str(tuned))
    profile = load_profile(board, num_workers=5)
    assert profile.source == f"built-in < platforms/jetson-t234.toml < tuned:{tuned} < arguments"
    assert profile.num_workers == 5  # arguments win
    assert profile.prefetch_fraction == 0.2  # tuned beats the platform file
    assert profile.memory_mode == "mapped"  # the platform file beats built-in
    assert profile.stamp["model"] == board.model
    assert Profile().memory_mode == "auto"


def test_tuned_profile_found_in_user_config_dir(tmp_path, monkeypatch):
    board = probe(FIXTURES / "rpi4")
    config = tmp_path / "config"
    (config / "edgeload").mkdir(parents=True)
    _write_tuned(config / "edgeload" / "profile.toml", model=board.model, num_workers=2)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    profile = load_profile(board)
    assert profile.num_workers == 2
    assert "tuned:" in profile.source


def test_tuned_profile_from_another_device_is_ignored_with_one_warning(
    tmp_path, monkeypatch, caplog
):
    board = probe(FIXTURES / "jetson-nano")
    tuned = _write_tuned(tmp_path / "p.toml", model="NVIDIA Jetson AGX Orin", num_workers=9)
    monkeypatch.setenv(PROFILE_ENV, str(tuned))
    with caplog.at_level(logging.WARNING, logger="edgeload.platform.profile"):
        profile = load_profile(board)
    assert profile.num_workers != 9
    assert "tuned" not in profile.source
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "NVIDIA Jetson AGX Orin" in warnings[0].getMessage()


def test_missing_tuned_profile_named_by_env_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv(PROFILE_ENV, str(tmp_path / "nope.toml"))
    with pytest.raises(ProfileError, match=r"nope\.toml does not exist; run `edgeload autotune`"):
        load_profile(probe(FIXTURES / "rpi4"))


def test_bad_keyword_argument_is_an_argument_error():
    with pytest.raises(ArgumentError, match=r"arguments: worker_kind must be one of"):
        load_profile(probe(FIXTURES / "rpi4"), tuned=None, worker_kind="green")


def test_profiles_ship_inside_the_wheel(tmp_path):
    """Build the wheel, install it apart from the source tree, load every profile from it."""
    wheel_dir, target = tmp_path / "wheel", tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheel_dir), str(REPO)],
        check=True,
        timeout=300,
    )
    (wheel,) = wheel_dir.glob("edgeload-*.whl")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        timeout=300,
    )
    script = textwrap.dedent(
        """
        import edgeload, edgeload.platform.profile as p
        files = list(p.platform_files())
        assert edgeload.__file__.startswith(%r), edgeload.__file__
        for name, path in files:
            assert str(path).startswith(%r), path
            p.read_profile_file(path)
        print(len(files))
        """
    ) % (str(target), str(target))
    env = dict(os.environ, PYTHONPATH=str(target))
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == len(list(platform_files()))


def test_tuned_profile_from_another_power_mode_is_used_with_a_warning(
    tmp_path, monkeypatch, caplog
):
    import dataclasses

    board = dataclasses.replace(probe(FIXTURES / "jetson-orin-nano"), power_mode="15W (2)")
    tuned = tmp_path / "p.toml"
    tuned.write_text(
        f'[tuned]\nmodel = "{board.model}"\npower_mode = "MAXN (0)"\n\n[profile]\nnum_workers = 4\n'
    )
    monkeypatch.setenv(PROFILE_ENV, str(tuned))
    with caplog.at_level(logging.WARNING, logger="edgeload.platform.profile"):
        profile = load_profile(board)
    assert profile.num_workers == 4
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "MAXN (0)" in warning and "15W (2)" in warning and "edgeload autotune" in warning
    caplog.clear()
    same = dataclasses.replace(board, power_mode="MAXN (0)")
    with caplog.at_level(logging.WARNING, logger="edgeload.platform.profile"):
        load_profile(same)
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            'profile = "num_workers = 2"\n',
            r"profile must be a table .*got 'num_workers = 2' \(str\)",
        ),
        ("profile = [1, 2]\n", r"profile must be a table .*got \[1, 2\] \(list\)"),
        ('tuned = "x"\n[profile]\nnum_workers = 2\n', r"tuned must be a table .*got 'x' \(str\)"),
        ("match = 3\n", r"match must be a table .*got 3 \(int\)"),
        ('dataset = "fast"\n', r"dataset must be a table .*got 'fast' \(str\)"),
        ("[match]\nfamily = 3\n", r"\[match\] family must be a string or a list of strings, got 3"),
        ("[tuned]\nmodel = [1]\n", r"\[tuned\] model must be a single value, got \[1\]"),
        ("[video]\nnum_workers = 0\n", r"\[video\]: num_workers must be 1\.\.256"),
        ("description = 5\n", r"description must be a string, got 5"),
    ],
)
def test_a_malformed_tuned_profile_is_a_profile_error_naming_file_and_key(
    tmp_path, monkeypatch, text, says
):
    path = tmp_path / "profile.toml"
    path.write_text(text)
    monkeypatch.setenv(PROFILE_ENV, str(path))
    with pytest.raises(ProfileError, match=says) as info:
        load_profile(probe(FIXTURES / "rpi4"))
    assert str(path) in str(info.value)


def test_a_profile_whose_match_names_another_device_is_ignored_with_a_warning(monkeypatch, caplog):
    # EDGELOAD_PROFILE=platforms/jetson-t234.toml on a desktop: not this device's file.
    jetson_file = dict(platform_files())["platforms/jetson-t234.toml"]
    monkeypatch.setenv(PROFILE_ENV, str(jetson_file))
    desktop = probe(FIXTURES / "x86-desktop")
    with caplog.at_level(logging.WARNING, logger="edgeload.platform.profile"):
        profile = load_profile(desktop)
    assert profile.source == "built-in < platforms/generic-x86.toml"
    assert profile.memory_mode != "mapped"  # the Jetson file's choice
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert str(jetson_file) in warning
    assert "family 'jetson'" in warning and "'x86'" in warning
    # On the device it names, the same file applies.
    orin = probe(FIXTURES / "jetson-orin-nano")
    assert load_profile(orin).source.endswith(f"tuned:{jetson_file}")


def test_workload_tables_apply_only_to_their_kind_of_loader(tmp_path, monkeypatch):
    board = probe(FIXTURES / "rpi4")
    path = tmp_path / "profile.toml"
    path.write_text(
        f'[tuned]\nmodel = "{board.model}"\n\n[profile]\nthread_budget = 3\n\n'
        "[dataset]\nnum_workers = 3\n\n[video]\nnum_workers = 5\nthread_budget = 2\n"
    )
    monkeypatch.setenv(PROFILE_ENV, str(path))
    untuned = load_profile(board, tuned=None)
    dataset = load_profile(board, workload="dataset")
    video = load_profile(board, workload="video")
    either = load_profile(board)
    assert (dataset.num_workers, dataset.thread_budget) == (3, 3)
    assert (video.num_workers, video.thread_budget) == (5, 2)
    assert (either.num_workers, either.thread_budget) == (untuned.num_workers, 3)


def test_an_old_flat_tuned_profile_applies_to_every_loader(tmp_path, monkeypatch):
    board = probe(FIXTURES / "rpi4")
    tuned = _write_tuned(tmp_path / "p.toml", model=board.model, num_workers=3)
    monkeypatch.setenv(PROFILE_ENV, str(tuned))
    for kind in ("dataset", "video", None):
        assert load_profile(board, workload=kind).num_workers == 3
