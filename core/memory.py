"""The C allocator of a long-lived process: freed large buffers go back to the system.

glibc's ``malloc`` serves a block of at least ``M_MMAP_THRESHOLD`` bytes (128 KiB at start) with a mapping of
its own, unmapped when the block is freed. Left alone, it *raises* that threshold to the size of every such
block freed (up to 32 MiB: the "dynamic threshold"), so once one multi-MiB buffer has been freed (in the API
process: the result of a monitor's window query, a few MiB in libpq and psycopg), every later buffer below
that size is carved out of the heap arenas instead. In a process whose other threads keep allocating small
long-lived objects meanwhile (serving), each freed buffer leaves a hole that a small object splits and the
next, slightly larger buffer does not fit, so the heap grows run after run while the memory in use stays
flat (see docs/performance.md, "Soak"). Setting the threshold explicitly turns the dynamic adjustment off:
large buffers keep their own mappings and return to the system when freed.
"""

from __future__ import annotations

import ctypes
import logging
import platform

log = logging.getLogger("driftwarden.memory")

M_MMAP_THRESHOLD = -3  # glibc's malloc.h
MAX_MMAP_THRESHOLD = 32 * 2**20  # glibc refuses more on 64-bit systems (HEAP_MAX_SIZE / 2)


def fix_mmap_threshold(threshold_bytes: int) -> bool:
    """Serve blocks of ``threshold_bytes`` and more with their own mappings, with no dynamic adjustment.

    Returns whether it was applied: only with glibc (elsewhere, or when ``threshold_bytes`` is 0, the
    allocator is left as it is); raises ``ValueError`` for a threshold glibc would refuse.
    """
    if threshold_bytes == 0 or platform.libc_ver()[0] != "glibc":
        return False
    if not 0 < threshold_bytes <= MAX_MMAP_THRESHOLD:
        raise ValueError(f"mmap threshold must be 1 to {MAX_MMAP_THRESHOLD} bytes, got {threshold_bytes}")
    libc = ctypes.CDLL(None)
    mallopt = libc.mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    if mallopt(M_MMAP_THRESHOLD, threshold_bytes) != 1:
        log.warning("malloc: glibc refused an mmap threshold of %d bytes", threshold_bytes)
        return False
    log.debug("malloc: blocks of %d bytes and more get their own mappings", threshold_bytes)
    return True


def trim_heap() -> bool:
    """Hand the free pages of every malloc arena back to the system (glibc's ``malloc_trim``).

    For a phase that freed many large buffers carved out of the heap (threads' work buffers, a reference's
    columns: the dynamic threshold above puts them there) before the next phase allocates its own: without
    it the next phase grows on top of pages nothing uses. Returns whether it ran (glibc only).
    """
    if platform.libc_ver()[0] != "glibc":
        return False
    malloc_trim = ctypes.CDLL(None).malloc_trim
    malloc_trim.argtypes = [ctypes.c_size_t]
    malloc_trim.restype = ctypes.c_int
    malloc_trim(0)
    return True
