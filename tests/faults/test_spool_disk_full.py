"""The spool's disk really full: a 64 KiB tmpfs mounted by the test (CI runs as root; mounting needs it).

An append the disk refuses raises ``ENOSPC`` and leaves nothing of itself behind: no half-written line
that the next append would glue onto (that row would then be unreadable, a silent loss). Once space is
freed, appends go on in a new segment and a replay returns exactly the rows whose appends succeeded, in
order.
"""

from __future__ import annotations

import errno
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from predictions.batch import LogBatch, predictions_in
from predictions.spool import SUFFIX, Spool, decode_row
from tests.faults.conftest import log_row


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.fail(f"cannot mount a small tmpfs (root needed): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)  # lazy: a file left open by a failure


def test_enospc_leaves_no_torn_line_and_appends_resume_once_space_is_freed(small_disk: Path) -> None:
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * 40_000)  # most of the disk: the spool fills it in a few appends
    spool = Spool(small_disk / "spool")
    kept: list[LogBatch] = []
    refused = 0
    i = 0
    while refused < 3:
        batch = [log_row(i + j, size=1 + j % 3) for j in range(7)]  # requests of 1 to 3 predictions
        i += 7
        try:
            spool.append(batch, sync=True)
            kept += batch
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
            refused += 1
    assert kept, "nothing fitted: the filler is too big"
    assert spool.pending_rows == predictions_in(kept) > len(kept)  # predictions, not lines
    for seg in (small_disk / "spool").glob(f"*{SUFFIX}"):
        data = seg.read_bytes()
        assert data == b"" or data.endswith(b"\n"), f"{seg.name} ends in a torn line"
        for line in data.splitlines():
            decode_row(line)  # every line on disk is a whole row

    filler.unlink()  # space again
    more = [log_row(i + j, size=2) for j in range(5)]
    spool.append(more, sync=True)
    kept += more
    replayed: list[str] = []
    while (read := spool.peek(50)) is not None:
        replayed += [pid for r in read.rows for pid in r.ids()]
        spool.commit(read)
    assert replayed == [pid for r in kept for pid in r.ids()]
    assert spool.corrupt_lines == 0 and spool.pending_rows == 0
    spool.close()
