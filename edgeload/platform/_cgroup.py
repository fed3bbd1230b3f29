"""cgroup v1 and v2 limits (CPU quota, cpuset, memory) and container evidence.

The process's cgroup comes from ``proc/self/cgroup``; its directory is looked up
under the mount point (from ``proc/self/mounts``, else the usual ``sys/fs/cgroup``
layout). Inside a container the mount root often *is* the container's cgroup while
``proc/self/cgroup`` still names the host path, so the lookup falls back to the
mount root. Limits are the tightest along the path from the cgroup up to the root.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

from ._read import Reader, parse_cpu_list

# cgroup v1 writes "no limit" as the largest page-aligned int64.
_V1_UNLIMITED = 1 << 60


@dataclass(frozen=True)
class CgroupLimits:
    quota_cpus: float | None = None
    cpuset: tuple[int, ...] | None = None
    memory_limit: int | None = None
    memory_used: int | None = None
    version: str | None = None


def _membership(reader: Reader) -> tuple[dict[str, str], str | None]:
    """proc/self/cgroup -> ({v1 controller: path}, v2 path)."""
    v1: dict[str, str] = {}
    v2 = None
    for line in (reader.read_text("proc/self/cgroup") or "").splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3 or not parts[2].startswith("/"):
            continue
        if parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
        for controller in parts[1].split(","):
            if controller:
                v1[controller] = parts[2]
    if not v1 and v2 is None:
        # No membership file (a hand-made tree): read the limits at the mount roots.
        return {"cpu": "/", "memory": "/", "cpuset": "/"}, "/"
    return v1, v2


def _mounts(reader: Reader) -> list[tuple[str, str, set[str]]]:
    """(mount point, fstype, options) of cgroup mounts."""
    text = reader.read_text("proc/self/mounts") or reader.read_text("proc/mounts") or ""
    out = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] in ("cgroup", "cgroup2"):
            out.append((fields[1], fields[2], set(fields[3].split(","))))
    return out


def _candidate_dirs(reader: Reader, mount: str, path: str) -> list[str]:
    """The cgroup's directory and its ancestors under ``mount``, else the mount root."""
    parts = [p for p in path.split("/") if p]
    found = []
    for depth in range(len(parts), -1, -1):
        rel = "/".join([mount.strip("/"), *parts[:depth]])
        if reader.is_dir(rel):
            found.append(rel)
    return found


def _v1_mount(reader: Reader, mounts: list[tuple[str, str, set[str]]], controller: str) -> str:
    for point, fstype, options in mounts:
        if fstype == "cgroup" and controller in options:
            return point
    for name in (controller, "cpu,cpuacct", "cpuacct,cpu"):
        if reader.is_dir(f"sys/fs/cgroup/{name}"):
            return f"sys/fs/cgroup/{name}"
    return f"sys/fs/cgroup/{controller}"


def _v2_mount(reader: Reader, mounts: list[tuple[str, str, set[str]]]) -> str:
    for point, fstype, _ in mounts:
        if fstype == "cgroup2":
            return point
    for rel in ("sys/fs/cgroup", "sys/fs/cgroup/unified"):
        if reader.exists(f"{rel}/cgroup.controllers"):
            return rel
    return "sys/fs/cgroup"


def _min(values: list[float]) -> float | None:
    return min(values) if values else None


def read_limits(reader: Reader) -> CgroupLimits:
    """The tightest CPU quota, cpuset and memory limit that apply to this process."""
    v1, v2_path = _membership(reader)
    mounts = _mounts(reader)
    quotas: list[float] = []
    memory: list[float] = []
    used = None
    cpuset = None
    version = None
    if v2_path is not None:
        mount = _v2_mount(reader, mounts)
        dirs = _candidate_dirs(reader, mount, v2_path)
        for d in dirs:
            match = re.fullmatch(r"(\d{1,18}) (\d{1,18})", reader.read_line(f"{d}/cpu.max") or "")
            if match and int(match.group(1)) > 0 and int(match.group(2)) > 0:
                quotas.append(int(match.group(1)) / int(match.group(2)))
            limit = reader.read_int(f"{d}/memory.max")
            if limit is not None and limit > 0:
                memory.append(limit)
            if cpuset is None:
                cpuset = parse_cpu_list(reader.read_line(f"{d}/cpuset.cpus.effective"))
        if dirs and (quotas or memory or cpuset):
            version = "v2"
            used = reader.read_int(f"{dirs[0]}/memory.current")
    for controller in ("cpu", "memory", "cpuset"):
        if controller not in v1:
            continue
        dirs = _candidate_dirs(reader, _v1_mount(reader, mounts, controller), v1[controller])
        for d in dirs:
            if controller == "cpu":
                quota = reader.read_int(f"{d}/cpu.cfs_quota_us")
                period = reader.read_int(f"{d}/cpu.cfs_period_us")
                if quota is not None and period and quota > 0 and period > 0:
                    quotas.append(quota / period)
            elif controller == "memory":
                limit = reader.read_int(f"{d}/memory.limit_in_bytes")
                if limit is not None and 0 < limit < _V1_UNLIMITED:
                    memory.append(limit)
                    if used is None:
                        used = reader.read_int(f"{d}/memory.usage_in_bytes")
            elif cpuset is None:
                cpuset = parse_cpu_list(reader.read_line(f"{d}/cpuset.cpus"))
        if dirs:
            version = version or "v1"
    quota_cpus = _min(quotas)
    memory_limit = _min(memory)
    return CgroupLimits(
        quota_cpus=None if quota_cpus is None else round(quota_cpus, 3),
        cpuset=cpuset,
        memory_limit=None if memory_limit is None else int(memory_limit),
        memory_used=used if memory_limit is not None else None,
        version=version,
    )


def usable_cpus(
    online: tuple[int, ...], allowed: set[int] | None, quota_cpus: float | None
) -> tuple[int, int | None]:
    """(CPUs the process may keep busy, size of the allowed set) - quota rounded up, >= 1."""
    allowed_count = None
    count = len(online) or 1
    restricted = allowed & set(online) if allowed and online else None
    # A set that shares no CPU with the online ones is stale or garbage: ignore it.
    if restricted:
        allowed_count = count = len(restricted)
    if quota_cpus is not None and quota_cpus > 0:
        count = min(count, math.ceil(quota_cpus - 1e-9))
    return max(1, count), allowed_count


_CONTAINER_MARKERS = re.compile(r"docker|kubepods|containerd|libpod|lxc|podman")


def container_evidence(reader: Reader) -> str | None:
    """Why this looks like a container (the file that says so), or None."""
    for marker in (".dockerenv", "run/.containerenv", "run/systemd/container"):
        if reader.exists(marker):
            return marker
    for rel in ("proc/1/cgroup", "proc/self/cgroup"):
        if _CONTAINER_MARKERS.search(reader.read_text(rel) or ""):
            return rel
    environ = reader.read_bytes("proc/1/environ") or b""
    if any(item.startswith(b"container=") for item in environ.split(b"\x00")):
        return "proc/1/environ"
    return None


def affinity() -> set[int] | None:
    """This process's CPU affinity, where the OS exposes it."""
    getter = getattr(os, "sched_getaffinity", None)
    if getter is None:
        return None
    try:
        return set(getter(0))
    except OSError:
        return None
