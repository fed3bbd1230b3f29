"""The packages people use instead of edgeload, installed for benchmarks only.

``ultralytics`` (its ``LoadStreams``) and ``vidgear`` (``CamGear``) are installed with
``pip install --no-deps --target`` into a directory of their own under the benchmark
cache, with the few light dependencies they import that the edgeload environment
lacks.  Nothing lands in the environment itself, so torch, numpy and OpenCV stay
exactly as they are: the peers run in child processes that get the directory on
their ``PYTHONPATH``.  ultralytics reads torchvision's version at import, so the
torchvision release that matches the installed torch is put there too (never
replacing an installed one).  A peer that cannot be installed or imported is
reported with the reason, never left out silently.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PEERS = {
    # name -> (pip requirements, the import a benchmark needs)
    "ultralytics": (["ultralytics"], "from ultralytics.data.loaders import LoadStreams"),
    "vidgear": (["vidgear", "colorlog", "tqdm"], "from vidgear.gears import CamGear"),
}
_TIMEOUT_S = 600


def _torchvision_requirement() -> list[str]:
    """The torchvision matching this torch (2.N pairs with 0.(N+15)), if none is installed."""
    try:
        import importlib.metadata as md

        md.version("torchvision")
        return []
    except Exception:
        pass
    import torch

    major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    return [f"torchvision=={major - 2}.{minor + 15}.*"] if major == 2 else []


def peer_env(site: Path) -> dict[str, str]:
    """The environment for a child process that runs a peer from ``site``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(site)) if p)
    env["YOLO_VERBOSE"] = "False"  # ultralytics: no banner, no settings chatter
    env["YOLO_OFFLINE"] = "True"
    return env


def ensure(cache: Path, names: list[str]) -> tuple[Path, dict[str, str]]:
    """Install ``names`` (once) into ``cache/peers``; return the directory and, per
    peer, its version or ``missing: <why>``."""
    site = cache / "peers"
    site.mkdir(parents=True, exist_ok=True)
    status: dict[str, str] = {}
    for name in names:
        reqs, probe = PEERS[name]
        if name == "ultralytics":
            reqs = reqs + _torchvision_requirement()
        if _version(site, name, probe) is None:
            cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                   str(site), *reqs]  # fmt: skip
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=_TIMEOUT_S)
                if done.returncode:
                    status[name] = f"missing: pip failed: {done.stderr.strip()[-300:]}"
                    continue
            except (OSError, subprocess.TimeoutExpired) as exc:
                status[name] = f"missing: pip failed: {exc}"
                continue
        version = _version(site, name, probe)
        status[name] = version if version is not None else f"missing: {probe!r} fails"
    return site, status


def _version(site: Path, name: str, probe: str) -> str | None:
    code = f"{probe}; import importlib.metadata as m; print(m.version({name!r}))"
    try:
        done = subprocess.run([sys.executable, "-c", code], env=peer_env(site),
                              capture_output=True, text=True, timeout=120)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.strip().splitlines()
    return lines[-1] if done.returncode == 0 and lines else None
