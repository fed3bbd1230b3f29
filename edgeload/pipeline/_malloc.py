"""glibc's malloc set up as in a program that allocates its batches: :func:`prime_malloc`.

glibc serves each block above its mmap threshold (128 KiB at start) with a mapping of
its own, unmapped again on ``free``: every use of such a block faults its pages in and
has the kernel zero them. The threshold follows the program: freeing a mapped block
raises it to that block's size (at most 32 MiB on 64-bit), and the trim threshold to
twice that, so a program that allocates a batch per step soon serves its large
temporaries from the heap, whose pages stay mapped.

A process fed by edgeload allocates no batches: its slots are ``mmap`` memory, never
malloc's. Its threshold would stay at 128 KiB, and the consumer's model would map,
fault and unmap its activations (with torch on the CPU, hundreds of blocks over
128 KiB per forward) at every step. So the first slot pool of a process frees one
mapped block of glibc's largest dynamic size, once: glibc then behaves as in a
program that allocates, with its own rule and its own limit. A threshold the user
fixed (``MALLOC_MMAP_THRESHOLD_``, ``GLIBC_TUNABLES``, ``mallopt``) turns glibc's
dynamic rule off, and that setting stays as it is; other C libraries are left alone.
"""

from __future__ import annotations

import ctypes
import logging
import sys
import threading

_log = logging.getLogger("edgeload.pipeline")

# glibc raises the threshold only for a freed mapped chunk of at most 32 MiB (its
# DEFAULT_MMAP_THRESHOLD_MAX on 64-bit); the chunk is the request rounded up to whole
# pages, so the request leaves room for one 64 KiB page.
_BLOCK_BYTES = 32 * 1024 * 1024 - 128 * 1024

_lock = threading.Lock()
_done = False


def prime_malloc() -> bool:
    """Free one large mapped block through glibc's malloc, once per process.

    Returns:
        True when this call primed glibc; False when it ran before, or the C library
        is not glibc (musl, macOS, Windows) or not 64-bit.
    """
    global _done
    with _lock:
        if _done:
            return False
        _done = True
        # 32-bit builds cap the threshold at 512 KiB, below a model's activations.
        if not sys.platform.startswith("linux") or ctypes.sizeof(ctypes.c_void_p) < 8:
            return False
        try:
            libc = ctypes.CDLL(None)
            libc.gnu_get_libc_version  # noqa: B018 - glibc only: its own symbol
        except (OSError, AttributeError):
            return False
        malloc, free = libc.malloc, libc.free
        malloc.restype, malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
        free.restype, free.argtypes = None, [ctypes.c_void_p]
        # Mapped and unmapped without a page touched: two system calls, no memory.
        block = malloc(_BLOCK_BYTES)
        if not block:
            return False
        free(block)
    _log.debug("glibc malloc primed: large temporaries now come from the heap")
    return True
