"""The public surface: a sorted, complete ``__all__``, and a light import."""

from __future__ import annotations

import subprocess
import sys

import edgeload


def test_all_is_sorted_and_complete():
    names = edgeload.__all__
    assert names == sorted(names)
    for name in names:  # the lazy ones load here
        assert getattr(edgeload, name) is not None
    public = {n for n in vars(edgeload) if not n.startswith("_") and not _is_module(n)}
    assert public == set(names) - {"__version__"}
    assert set(names) <= set(dir(edgeload))
    assert set(edgeload._LAZY) <= set(names)  # every name that loads on use is public


def _is_module(name: str) -> bool:
    return type(getattr(edgeload, name)).__name__ == "module"


_OF_INTEREST = "m in ('numpy', 'torch', 'cv2') or m.count('.') == 1 and m.startswith('edgeload.')"


def _loaded_after(code: str, which: str = _OF_INTEREST) -> list[str]:
    """Modules ``m`` in ``sys.modules`` for which ``which`` holds after ``code`` runs in a
    fresh interpreter."""
    probe = f"import sys; {code}; print(' '.join(sorted(m for m in sys.modules if {which})))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_import_loads_only_the_errors_until_a_name_is_used():
    # `edgeload --help` and `except edgeload.SourceError` load no numpy and no subpackage.
    assert _loaded_after("import edgeload") == [
        "edgeload._compat",
        "edgeload._lazy",
        "edgeload._version",
        "edgeload.errors",
    ]
    assert "numpy" not in _loaded_after("from edgeload.cli.main import main")


def test_a_dataset_program_does_not_load_the_video_path():
    loaded = _loaded_after("from edgeload import DataLoader")
    assert "edgeload.dataset" in loaded
    assert "edgeload.video" not in loaded
    assert "edgeload.tuning" not in loaded
    assert "edgeload.dataset" not in _loaded_after("from edgeload import StreamLoader")


def test_a_loader_with_host_slots_loads_no_cuda_runtime():
    # On a CPU-only board (a Pi) the engines, the copier and the CUDA runtime's ctypes
    # bindings are about 1 MiB of the process, so they load only for a GPU memory mode.
    code = (
        "import numpy, edgeload as el; "
        "loader = el.DataLoader(numpy.zeros((16, 3), 'uint8'), batch_size=4, num_workers=2, "
        "memory_mode='host'); "
        "assert sum(len(b) for b in loader) == 16; loader.close()"
    )
    loaded = _loaded_after(code, which="m.startswith('edgeload.cuda')")
    assert loaded == ["edgeload.cuda", "edgeload.cuda.slot_mode"]
    # ... and as attributes they still load on first use
    assert _loaded_after(
        "import edgeload.cuda as c; c.HostEngine", which="m == 'edgeload.cuda.host_engine'"
    ) == ["edgeload.cuda.host_engine"]


def test_autotune_stays_the_function_once_its_subpackage_is_loaded():
    import edgeload.cli.autotune  # loads the subpackage too
    import edgeload.tuning.tune

    assert edgeload.autotune is edgeload.tuning.tune.autotune
    assert callable(edgeload.autotune)
    assert edgeload.autotune.__module__ == "edgeload.tuning.tune"
    assert edgeload.tuning is sys.modules["edgeload.tuning"]


def test_subpackages_are_attributes_as_before():
    # `import edgeload as el; el.cuda.HostEngine(...)` (the README's own example)
    code = (
        "import edgeload as el; "
        "print(el.cuda.HostEngine.__name__, el.video.StreamLoader.__name__, "
        "el.pipeline.SlotPool.__name__, el.checkpoint.save_state.__name__, callable(el.autotune), "
        "el.tuning.TuneResult.__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [
        "HostEngine",
        "StreamLoader",
        "SlotPool",
        "save_state",
        "True",
        "TuneResult",
    ]


def test_an_unknown_name_is_an_attribute_error_naming_it():
    try:
        edgeload.StreamLoaders  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "StreamLoaders" in str(exc)
    else:
        raise AssertionError("edgeload.StreamLoaders resolved")


def test_import_does_not_pull_torch_or_cv2():
    # `edgeload --help` must stay fast on a Pi: torch and cv2 load only when used.
    code = "import sys, edgeload; print(sorted(m for m in ('torch', 'cv2') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_every_error_is_an_edgeload_error_and_the_builtin_its_callers_catch():
    """``except TimeoutError`` / ``except ValueError`` keep working around edgeload calls."""
    assert issubclass(edgeload.errors.WaitTimeout, TimeoutError)
    assert issubclass(edgeload.WorkerTimeout, TimeoutError)
    assert issubclass(edgeload.WorkerTimeout, RuntimeError)  # what torch raises
    assert issubclass(edgeload.errors.WorkerDied, RuntimeError)
    assert issubclass(edgeload.ArgumentError, ValueError)
    assert issubclass(edgeload.ProfileError, ValueError)
    for name in edgeload.errors.__all__:
        assert issubclass(getattr(edgeload.errors, name), edgeload.EdgeloadError), name
