"""Settings numpy reads when it loads, for a process that compares large tables (``driftwarden drift``, the
Python API's ``import driftwarden``), unless the environment gives them (measured on 1M-row files).

One OpenBLAS thread: a comparison's matrix products are small (a few axes times a batch of rows), and on more
threads OpenBLAS's idle workers spin between them, ~0.5 of ~2.5 CPU-seconds, while the comparison keeps its
own threads busy (reading, counting). No transparent huge pages for numpy's arrays: a comparison allocates and
frees many arrays of megabytes, and the kernel's zeroing and compacting of huge pages for them cost ~0.35
CPU-seconds more than small pages. Nothing is set when numpy is already loaded (too late to matter).
"""

from __future__ import annotations

import os
import sys

SETTINGS = {"OPENBLAS_NUM_THREADS": "1", "NUMPY_MADVISE_HUGEPAGE": "0"}


def numpy_settings() -> None:
    """Set :data:`SETTINGS` in the environment before numpy loads (a value already there wins)."""
    if "numpy" in sys.modules:
        return
    for name, value in SETTINGS.items():
        os.environ.setdefault(name, value)
