"""The Python 3.8 stand-ins in edgeload._compat, and the static 3.8 gate (scripts/check_py38.py)."""

import subprocess
import sys
import traceback
from pathlib import Path, PurePosixPath

import pytest

# Internal: the Python 3.8 stand-ins are edgeload's own helpers, tested as units.
from edgeload._compat import format_exception, is_relative_to, package_dir, zip_strict

REPO = Path(__file__).resolve().parents[1]
GATE = REPO / "scripts" / "check_py38.py"


def test_zip_strict_pairs_equal_lengths_and_refuses_unequal_ones():
    assert list(zip_strict([1, 2], "ab")) == [(1, "a"), (2, "b")]
    assert list(zip_strict()) == []
    with pytest.raises(ValueError, match="argument 2 is shorter"):
        list(zip_strict([1, 2, 3], [1, 2]))
    with pytest.raises(ValueError, match="argument 1 is shorter"):
        list(zip_strict([1], iter([1, 2])))


def test_format_exception_matches_the_three_argument_form():
    try:
        raise KeyError("k")
    except KeyError as exc:
        caught = exc
    text = "".join(format_exception(caught))
    assert text == "".join(traceback.format_exception(KeyError, caught, caught.__traceback__))
    assert "KeyError: 'k'" in text and "test_format_exception" in text


def test_is_relative_to():
    assert is_relative_to(PurePosixPath("/etc/edgeload/x.toml"), "/etc")
    assert not is_relative_to(PurePosixPath("/home/etc"), "/etc")


def test_package_dir_finds_the_shipped_package_data():
    root = package_dir("edgeload")
    assert root.joinpath("__init__.py").is_file()


BAD = """\
import traceback
import os
from collections.abc import Callable
Alias = int | None
Pairs = tuple[int, str]
Sink = Callable[[int], None]
Paths = os.PathLike[str]
def f(x):
    isinstance(x, (int, str))
    isinstance(x, int | str)
    traceback.format_exception(x)
    return x.is_relative_to("/etc")
def g(x: list[int]) -> None: ...
"""

GOOD = """\
from __future__ import annotations
import traceback
from typing import TYPE_CHECKING, Callable, Optional, Tuple
if TYPE_CHECKING:
    import numpy.typing as npt
    Later = int | None
Alias = Optional[int]
Pairs = Tuple[int, str]
Sink = Callable[[int], None]
FLAGS = 1 | 2
def f(x: list[int] | None) -> dict[str, int]:
    isinstance(x, (int, str))
    traceback.format_exception(type(x), x, None)
    return {}
"""


def _gate(tmp_path, text):
    path = tmp_path / "mod.py"
    path.write_text(text)
    return subprocess.run(
        [sys.executable, str(GATE), str(path)], capture_output=True, text=True, timeout=60
    )


def test_gate_reports_each_construct_python_38_cannot_run(tmp_path):
    run = _gate(tmp_path, BAD)
    assert run.returncode == 1
    lines = {int(line.split(":")[1]) for line in run.stdout.splitlines()}
    assert lines == {4, 5, 6, 7, 10, 11, 12, 13}, run.stdout


def test_gate_passes_annotations_type_checking_blocks_and_typing_generics(tmp_path):
    run = _gate(tmp_path, GOOD)
    assert (run.returncode, run.stdout) == (0, "")


def test_the_package_tests_and_scripts_pass_the_gate():
    dirs = [str(REPO / d) for d in ("edgeload", "tests", "scripts", "benchmarks")]
    run = subprocess.run(
        [sys.executable, str(GATE), *dirs], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stdout
