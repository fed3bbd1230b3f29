#!/usr/bin/env python3
"""``edgeload autotune`` for people who deploy from a checkout: same options, same output.

python scripts/autotune.py --video rtsp://cam1/stream /data/lot.mp4 --size 640x640
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the checkout's edgeload, also without `pip install`

from edgeload.cli.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["autotune", *sys.argv[1:]]))
