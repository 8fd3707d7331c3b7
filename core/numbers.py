"""Numbers read from outside (JSON bodies, stored reports, settings): one rule for what counts as one."""

from __future__ import annotations

import math
from typing import Any


def finite_float(value: Any) -> float | None:
    """``value`` as a float when it is a finite int or float (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None
