"""Reading files under a probe root, tolerant of every way they go wrong.

Every reader returns None (or an empty result) for a missing, unreadable or garbled
file; none raises. Paths are resolved *inside* the root: on a real device
``proc/device-tree`` is an absolute symlink to ``/sys/firmware/devicetree/base``, and
following it on the host instead of under a fixture root would read the wrong machine.
"""

from __future__ import annotations

import os
import re

# /proc and /sys files are tiny; a cap keeps a garbage or device file from eating RAM.
_MAX_BYTES = 1 << 20
_MAX_SYMLINKS = 40
# Linux's NR_CPUS upper bound; a longer list is garbage.
_MAX_CPUS = 8192


class Reader:
    """Reads files relative to one root, resolving symlinks within that root."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)

    def resolve(self, relpath: str) -> str | None:
        """The host path of ``relpath`` with every symlink followed inside the root."""
        parts = [p for p in relpath.strip("/").split("/") if p not in ("", ".")]
        done: list[str] = []
        hops = 0
        while parts:
            name = parts.pop(0)
            if name == "..":
                if done:
                    done.pop()
                continue
            candidate = os.path.join(self.root, *done, name)
            if os.path.islink(candidate):
                hops += 1
                if hops > _MAX_SYMLINKS:
                    return None
                try:
                    target = os.readlink(candidate)
                except OSError:
                    return None
                if target.startswith("/"):
                    done = []
                parts = [p for p in target.split("/") if p not in ("", ".")] + parts
                continue
            done.append(name)
        return os.path.join(self.root, *done)

    def read_bytes(self, relpath: str) -> bytes | None:
        """File content (at most 1 MiB), or None."""
        path = self.resolve(relpath)
        # Regular files only: opening a FIFO or a device node could block forever.
        if path is None or not os.path.isfile(path):
            return None
        try:
            with open(path, "rb") as f:
                return f.read(_MAX_BYTES)
        except (OSError, ValueError):
            return None

    def read_text(self, relpath: str) -> str | None:
        """File content decoded as UTF-8 (bad bytes replaced), or None."""
        data = self.read_bytes(relpath)
        return None if data is None else data.decode("utf-8", errors="replace")

    def read_line(self, relpath: str) -> str | None:
        """First line, stripped of whitespace and NULs; None when empty or missing."""
        text = self.read_text(relpath)
        if text is None:
            return None
        line = text.split("\n", 1)[0].strip().strip("\x00").strip()
        return line or None

    def read_int(self, relpath: str) -> int | None:
        """First line as a decimal integer, or None."""
        line = self.read_line(relpath)
        if line is None or not re.fullmatch(r"-?\d{1,20}", line):
            return None
        return int(line)

    def read_dt_strings(self, relpath: str) -> tuple[str, ...]:
        """A device-tree string list: NUL-separated, NUL-terminated; printable entries only."""
        data = self.read_bytes(relpath)
        if not data:
            return ()
        out = []
        for chunk in data.split(b"\x00"):
            text = chunk.decode("utf-8", errors="replace").strip()
            if text and text.isprintable() and "\ufffd" not in text:
                out.append(text)
        return tuple(out)

    def is_dir(self, relpath: str) -> bool:
        path = self.resolve(relpath)
        return path is not None and os.path.isdir(path)

    def exists(self, relpath: str) -> bool:
        path = self.resolve(relpath)
        return path is not None and os.path.lexists(path)

    def listdir(self, relpath: str) -> list[str]:
        """Entry names, sorted; empty when not a readable directory."""
        path = self.resolve(relpath)
        if path is None:
            return []
        try:
            return sorted(os.listdir(path))
        except OSError:
            return []


def parse_cpu_list(text: str | None) -> tuple[int, ...] | None:
    """Kernel CPU list syntax (``"0-3,5"``) as sorted ids; None when empty or malformed."""
    if text is None:
        return None
    text = text.strip().strip("\x00")
    if not text:
        return None
    cpus: set[int] = set()
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d{1,5})(?:-(\d{1,5}))?\s*", part)
        if match is None:
            return None
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) else first
        if last < first or last - first >= _MAX_CPUS:
            return None
        cpus.update(range(first, last + 1))
    if len(cpus) > _MAX_CPUS:
        return None
    return tuple(sorted(cpus))


def parse_cpuinfo(text: str | None) -> tuple[dict[int, dict[str, str]], dict[str, str]]:
    """``proc/cpuinfo`` as per-processor fields and global fields.

    Blocks start at a ``processor`` line (arm64 kernels separate them with blank lines,
    older ones and captures may not end with a newline). Lines after the last block
    that are not per-CPU (``Hardware``, ``Revision``, ``Model`` on a Pi) are global.
    """
    per_cpu: dict[int, dict[str, str]] = {}
    global_fields: dict[str, str] = {}
    if not text:
        return per_cpu, global_fields
    current: dict[str, str] | None = None
    for raw in text.splitlines():
        if ":" not in raw:
            if not raw.strip():
                current = None
            continue
        key, _, value = raw.partition(":")
        key, value = key.strip(), value.strip()
        if key == "processor":
            if re.fullmatch(r"\d{1,5}", value):
                current = per_cpu.setdefault(int(value), {})
            else:
                # 32-bit ARM kernels once printed "Processor : ARMv7 Processor rev 4".
                global_fields.setdefault("model name", value)
                current = None
            continue
        target = current if current is not None else global_fields
        target.setdefault(key, value)
    return per_cpu, global_fields


def parse_kb_table(text: str | None) -> dict[str, int]:
    """``Key:   123 kB`` lines (``proc/meminfo``) as bytes; malformed lines are skipped."""
    out: dict[str, int] = {}
    if not text:
        return out
    for line in text.splitlines():
        match = re.fullmatch(r"\s*([\w()]+):\s*(\d{1,20})(\s*kB)?\s*", line)
        if match:
            value = int(match.group(2))
            out[match.group(1)] = value * 1024 if match.group(3) else value
    return out
