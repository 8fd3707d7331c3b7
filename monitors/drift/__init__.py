"""Pure drift statistics: numpy counts in, numbers and verdicts out.

Every test is listed once, by feature kind and name, in :mod:`monitors.drift.catalog`.
"""

from monitors.drift.base import DriftTest, Measurement, TestResult, adjust_p_values
from monitors.drift.catalog import TESTS, Registered
from monitors.drift.categorical import (
    CategoricalCounts,
    CategoricalDefault,
    CategoricalJensenShannon,
    CategoricalPSI,
    ChiSquare,
    UnseenCategories,
)
from monitors.drift.numeric import (
    KolmogorovSmirnov,
    NumericCounts,
    NumericDefault,
    NumericJensenShannon,
    NumericPSI,
    Wasserstein,
)

__all__ = [
    "TESTS",
    "CategoricalCounts",
    "CategoricalDefault",
    "CategoricalJensenShannon",
    "CategoricalPSI",
    "ChiSquare",
    "DriftTest",
    "KolmogorovSmirnov",
    "Measurement",
    "NumericCounts",
    "NumericDefault",
    "NumericJensenShannon",
    "NumericPSI",
    "Registered",
    "TestResult",
    "UnseenCategories",
    "Wasserstein",
    "adjust_p_values",
]
