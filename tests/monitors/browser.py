"""Headless Chromium screenshots and a minimal PNG decoder (8-bit RGB/RGBA) to check what was drawn."""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def chromium() -> str:
    """Path of Debian's ``chromium`` (``scripts/system-deps.sh`` installs it)."""
    path = shutil.which("chromium")
    if path is None:
        raise RuntimeError(
            "chromium is not installed; run scripts/system-deps.sh (apt-get install -y chromium)"
        )
    return path


def screenshot(url: str, out: Path, *, profile_dir: Path, size: tuple[int, int] = (1280, 2000)) -> Path:
    """Render ``url`` in headless Chromium and save a PNG screenshot at ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    cmd = [
        chromium(),
        *CHROMIUM_FLAGS,
        f"--user-data-dir={profile_dir}",
        f"--window-size={size[0]},{size[1]}",
        f"--screenshot={out}",
        url,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    if not out.exists():
        raise RuntimeError(f"chromium wrote no screenshot (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return out


def read_png(path: Path) -> np.ndarray:
    """Pixels of an 8-bit, non-interlaced RGB or RGBA PNG as ``(height, width, 3)`` uint8."""
    data = path.read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path} is not a PNG")
    pos, idat = 8, []
    width = height = channels = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or color not in (2, 6) or interlace:
                raise ValueError(
                    f"unsupported PNG (depth {depth}, color type {color}, interlace {interlace})"
                )
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + length
    raw = np.frombuffer(zlib.decompress(b"".join(idat)), dtype=np.uint8)
    stride = width * channels
    rows = raw.reshape(height, stride + 1)
    out = np.zeros((height, stride), dtype=np.int32)
    prev = np.zeros(stride, dtype=np.int32)
    for y in range(height):
        f, line = rows[y, 0], rows[y, 1:].astype(np.int32)
        if f == 0:
            cur = line
        elif f == 1:  # Sub: a running sum per channel
            cur = np.cumsum(line.reshape(width, channels), axis=0).reshape(-1) & 0xFF
        elif f == 2:  # Up
            cur = (line + prev) & 0xFF
        else:  # Average, Paeth: byte by byte (plain lists: much faster than numpy scalars)
            ln, up, px = line.tolist(), prev.tolist(), [0] * stride
            for x in range(stride):
                a = px[x - channels] if x >= channels else 0
                b = up[x]
                if f == 3:
                    pred = (a + b) // 2
                else:
                    c = up[x - channels] if x >= channels else 0
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                px[x] = (ln[x] + pred) & 0xFF
            cur = np.array(px, dtype=np.int32)
        out[y] = cur
        prev = cur
    return out.reshape(height, width, channels)[:, :, :3].astype(np.uint8)
