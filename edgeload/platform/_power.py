"""The Jetson power mode (nvpmodel): how many cores and what clocks the board runs at.

A tuned profile is measured at one power mode; ``edgeload autotune`` stamps it and
:func:`edgeload.platform.profile.load_profile` warns when the device now runs another.
"""

from __future__ import annotations

import re
import shutil
import subprocess

from ._read import Reader

# `nvpmodel -q` answers in milliseconds; a hung one must not hang a probe.
_NVPMODEL_TIMEOUT_S = 5.0


def read_power_mode(reader: Reader, *, live: bool) -> str | None:
    """The Jetson power mode (``"MAXN (0)"``), or None where the device has none.

    ``nvpmodel -q`` on a live probe, else the mode number in ``var/lib/nvpmodel/status``
    named through ``etc/nvpmodel.conf`` under the probe root.
    """
    if live and shutil.which("nvpmodel"):
        try:
            done = subprocess.run(
                ["nvpmodel", "-q"],
                capture_output=True,
                text=True,
                timeout=_NVPMODEL_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            done = None
        if done is not None and done.returncode == 0:
            name = re.search(r"NV Power Mode:\s*(\S+)", done.stdout)
            number = re.search(r"^\s*(\d+)\s*$", done.stdout, re.MULTILINE)
            if name:
                return name.group(1) + (f" ({int(number.group(1))})" if number else "")
    found = re.search(r"pmode:\s*(\d+)", reader.read_text("var/lib/nvpmodel/status") or "")
    if not found:
        return None
    mode = int(found.group(1))
    conf = reader.read_text("etc/nvpmodel.conf") or ""
    named = re.search(rf"<\s*POWER_MODEL\s+ID={mode}\s+NAME=([^\s>]+)", conf)
    return f"{named.group(1)} ({mode})" if named else str(mode)
