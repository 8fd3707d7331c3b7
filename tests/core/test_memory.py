"""The C allocator's mmap threshold: a serving worker's large transient buffers must not land in its heap.

Each case runs in a fresh interpreter (the allocator's state is per process) what the monitor does in the API
worker (docs/performance.md, "Soak"): one multi-MiB buffer freed (a window query's result: with glibc's
defaults, the mmap threshold then rises to its size), then buffers of a few hundred KiB held at once and
freed. Carved out of the heap, such buffers leave holes that the serving threads' small long-lived objects
split, and the heap grows run after run; with their own mappings they go back to the system when freed.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MiB = 2**20

LIBC, LIBC_VERSION = platform.libc_ver()
pytestmark = pytest.mark.skipif(
    LIBC != "glibc" or tuple(int(x) for x in LIBC_VERSION.split(".")[:2]) < (2, 33),
    reason="glibc's malloc, with mallinfo2 (glibc 2.33 and later)",
)

PATTERN = """
import ctypes, json

class Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd",
        "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Mallinfo2
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]

first = 8 * 2**20
p = libc.malloc(first)
ctypes.memset(p, 1, first)
libc.free(p)  # glibc's default: the mmap threshold becomes 8 MiB
before = libc.mallinfo2()
buffers = []
for i in range(32):  # a window's buffers, a few hundred KiB each, 17 MiB in all
    size = 512 * 1024 + i * 4096
    buffers.append(libc.malloc(size))
    ctypes.memset(buffers[-1], 1, size)
during = libc.mallinfo2()
for b in buffers:
    libc.free(b)
after = libc.mallinfo2()
print(json.dumps({
    "heap_growth": during.arena - before.arena,  # the buffers carved out of the heap
    "own_mappings": during.hblkhd - before.hblkhd,  # the buffers given mappings of their own
    "mapped_after_free": after.hblkhd - before.hblkhd,  # of those, still mapped once freed
}))
"""


def allocate(setup: str, env: dict[str, str] | None = None) -> dict[str, int]:
    """Run ``setup`` then the pattern in a fresh interpreter; where its buffers went (bytes)."""
    proc = subprocess.run(
        [sys.executable, "-c", setup + "\n" + PATTERN],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: dict[str, int] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def test_with_glibc_defaults_the_buffers_are_carved_out_of_the_heap() -> None:
    """The cause, on glibc's defaults (a control: it shows the pattern measures something)."""
    went = allocate("")
    assert went["heap_growth"] > 16 * MiB
    assert went["own_mappings"] < 1 * MiB


def test_a_fixed_threshold_maps_the_buffers_and_returns_them() -> None:
    went = allocate("from core.memory import fix_mmap_threshold\nassert fix_mmap_threshold(128 * 1024)")
    assert went["own_mappings"] > 16 * MiB
    assert went["heap_growth"] < 1 * MiB
    assert went["mapped_after_free"] <= 0  # unmapped on free: back to the system


def test_the_serve_worker_fixes_the_threshold(tmp_path: Path) -> None:
    """``driftwarden serve``'s app factory applies the setting (default 128 KiB) in its own process."""
    env = {
        "DRIFTWARDEN_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite'}",
        "DRIFTWARDEN_REGISTRY_PATH": str(tmp_path / "models"),
        "DRIFTWARDEN_SPOOL_PATH": str(tmp_path / "spool"),
    }
    setup = "from service.serving.app import worker_app\nworker_app()"
    went = allocate(setup, env)
    assert went["own_mappings"] > 16 * MiB
    assert went["heap_growth"] < 1 * MiB
    # 0 leaves glibc's default (the dynamic threshold): the buffers go to the heap again
    assert allocate(setup, {**env, "DRIFTWARDEN_MALLOC_MMAP_THRESHOLD_KB": "0"})["heap_growth"] > 16 * MiB


def test_a_threshold_glibc_would_refuse_is_an_error() -> None:
    from core.memory import MAX_MMAP_THRESHOLD, fix_mmap_threshold

    with pytest.raises(ValueError, match="mmap threshold"):
        fix_mmap_threshold(MAX_MMAP_THRESHOLD + 1)
    assert fix_mmap_threshold(0) is False  # 0: left as it is
