"""Pure drift statistics: numpy counts in, numbers and verdicts out."""

from monitors.drift.base import DriftTest, Measurement, TestResult, adjust_p_values
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
    "TestResult",
    "UnseenCategories",
    "Wasserstein",
    "adjust_p_values",
]
