"""Small builders shared by the monitor tests."""

from __future__ import annotations

import numpy as np

from monitors.drift import NumericCounts
from monitors.profile import NumericProfile, _numeric_from_dict, numeric_summary


def numeric_profile(values: np.ndarray) -> NumericProfile:
    return _numeric_from_dict(numeric_summary(values, name="x"))


def numeric_pair(reference: np.ndarray, current: np.ndarray) -> tuple[NumericCounts, NumericCounts]:
    ref = NumericCounts.from_profile(numeric_profile(reference))
    return ref, NumericCounts.from_values(current, reference=ref)
