"""What a test stack holds, for the noxfile's sessions (run inside each stack's venv or root).

    python scripts/stack_check.py check --python 3.8 --numpy 1.17.4 ...   print the versions,
        exit 1 naming each one that differs from what the session asked for (a stale cache
        fails here, at once, not in a test)
    python scripts/stack_check.py pins     print name==version for the system's own packages
        that a pip install must not replace (Debian's numpy, psutil, matplotlib and theirs)

Runs on every stack's Python, 3.8 up.
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import re
import sys
import warnings

# Debian's packages that torch's or the test tools' requirements could otherwise upgrade
SYSTEM_PACKAGES = (
    "numpy",
    "psutil",
    "matplotlib",
    "pillow",
    "packaging",
    "pyparsing",
    "python-dateutil",
)


def pins() -> int:
    import importlib.metadata as md

    for name in SYSTEM_PACKAGES:
        with contextlib.suppress(md.PackageNotFoundError):
            print(f"{name}=={md.version(name)}")
    return 0


def check(want: argparse.Namespace) -> int:
    import cv2
    import numpy
    import psutil

    # torch warns, rather than fails, at import when it was built against another numpy ABI
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import torch
    numpy_warnings = [str(w.message) for w in caught if "numpy" in str(w.message).lower()]

    gst = re.search(r"GStreamer:\s*(\S+)", cv2.getBuildInformation())
    have = {
        "python": "{}.{}".format(*sys.version_info[:2]),
        "numpy": numpy.__version__,
        "opencv": cv2.__version__,
        "psutil": psutil.__version__,
        "torch": torch.__version__.split("+")[0],
        "machine": platform.machine(),
    }
    print(
        f"Python {sys.version.split()[0]} on {have['machine']}, numpy {have['numpy']} from "
        f"{numpy.__path__[0]}, OpenCV {have['opencv']} (GStreamer {gst.group(1) if gst else '?'}), "
        f"psutil {have['psutil']}, torch {torch.__version__}",
        file=sys.stderr,
    )
    wrong = [
        f"{name} is {have[name]}, not {value}"
        for name, value in vars(want).items()
        if name in have and value is not None and have[name] != value
    ]
    if want.system_numpy and not numpy.__path__[0].startswith("/usr/lib/python3/"):
        wrong.append(f"numpy comes from {numpy.__path__[0]}, not the system's /usr/lib/python3")
    if want.gstreamer and (not gst or gst.group(1) != "YES"):
        wrong.append("OpenCV is built without GStreamer")
    wrong += [f"torch warned at import: {message}" for message in numpy_warnings]
    if torch.from_numpy(numpy.arange(3)).numpy().tolist() != [0, 1, 2]:
        wrong.append("torch.from_numpy does not round-trip a numpy array")
    for line in wrong:
        print(f"stack_check: {line}", file=sys.stderr)
    return 1 if wrong else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("pins", help="print the system packages' pins")
    want = commands.add_parser("check", help="print the versions; exit 1 on a mismatch")
    for name in ("python", "numpy", "opencv", "psutil", "torch", "machine"):
        want.add_argument(f"--{name}", help=f"the {name} version (or name) required")
    want.add_argument("--system-numpy", action="store_true", help="numpy must be the system's")
    want.add_argument("--gstreamer", action="store_true", help="OpenCV must have GStreamer")
    args = parser.parse_args()
    if args.command == "pins":
        return pins()
    del args.command
    return check(args)


if __name__ == "__main__":
    sys.exit(main())
