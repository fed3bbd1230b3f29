"""A model fed by edgeload keeps its large temporaries in malloc's heap, as one fed by
a loader that allocates its batches does (see edgeload/pipeline/_malloc.py). These
tests check glibc's state; the speed it brings is measured by ``bench.py detect``.

Each case runs in a fresh interpreter: glibc's threshold is per process, and this
test process has made slot pools already.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="glibc's malloc: Linux only"
)

# Whether a 24 MiB tensor (a model's large activation) is a mapping of its own, as
# glibc's mallinfo() counts them (hblks), after an edgeload loader ran or not. Checked
# once per interpreter: freeing the block would itself raise the threshold.
_CHILD = textwrap.dedent(
    """
    import ctypes, json, sys
    import numpy as np, torch
    import edgeload

    class MallInfo(ctypes.Structure):
        _fields_ = [(name, ctypes.c_int) for name in (
            "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
        ).split()]

    mallinfo = ctypes.CDLL(None).mallinfo
    mallinfo.restype = MallInfo
    batches = 0
    if sys.argv[1] == "loader":
        frames = [np.full((8, 8, 3), i, np.uint8) for i in range(8)]
        with edgeload.DataLoader(frames, batch_size=4) as loader:
            batches = len([b.clone() for b in loader])
    mapped = mallinfo().hblks
    activation = torch.ones(6 * 1024 * 1024)
    mapped = mallinfo().hblks - mapped
    print(json.dumps({"mapped": mapped, "batches": batches}))
    """
)


def _child(loader: bool, env: dict[str, str]) -> dict[str, int]:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, "loader" if loader else "none"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _glibc() -> bool:
    import ctypes

    try:
        ctypes.CDLL(None).gnu_get_libc_version  # noqa: B018
    except AttributeError:
        return False
    return True


@pytest.mark.skipif(not _glibc(), reason="the rule is glibc's")
def test_after_a_loader_ran_a_models_large_activation_comes_from_the_heap():
    assert _child(False, {}) == {"mapped": 1, "batches": 0}  # glibc's start: mapped
    assert _child(True, {}) == {"mapped": 0, "batches": 2}


@pytest.mark.skipif(not _glibc(), reason="the rule is glibc's")
def test_a_threshold_the_user_fixed_is_kept():
    assert _child(True, {"MALLOC_MMAP_THRESHOLD_": "131072"}) == {"mapped": 1, "batches": 2}
