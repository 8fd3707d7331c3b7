"""The catalog of drift tests by feature kind and name: the one list the engine, config and report read.

To add a test, write its class (a :class:`DriftTest` over :class:`NumericCounts` or
:class:`CategoricalCounts`, in ``numeric.py`` or ``categorical.py``) and add one line to :data:`TESTS`.
It can then be chosen by name in ``monitor.json`` (per kind or per feature) and, when ``reported``, is
computed for every feature of its kind and shown beside the verdict (``statistics`` in each result).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from monitors.drift.base import DriftTest, TestResult
from monitors.drift.categorical import (
    CategoricalDefault,
    CategoricalJensenShannon,
    CategoricalPSI,
    ChiSquare,
    UnseenCategories,
)
from monitors.drift.numeric import (
    KolmogorovSmirnov,
    NumericDefault,
    NumericJensenShannon,
    NumericPSI,
    Wasserstein,
)
from registry.schema import FeatureKind  # the kinds of the model's contract: numeric, categorical

DEFAULT = "default"


@dataclass(frozen=True)
class Registered:
    """One drift test as the configuration names it."""

    kind: FeatureKind
    name: str  # its name in monitor.json and in a report's ``statistics``
    test: type[DriftTest[Any]]
    reported: bool = True  # computed for every feature of its kind, beside the verdict


TESTS: tuple[Registered, ...] = (
    Registered(FeatureKind.NUMERIC, DEFAULT, NumericDefault, reported=False),
    Registered(FeatureKind.NUMERIC, "ks", KolmogorovSmirnov),
    Registered(FeatureKind.NUMERIC, "wasserstein", Wasserstein),
    Registered(FeatureKind.NUMERIC, "psi", NumericPSI),
    Registered(FeatureKind.NUMERIC, "jensen_shannon", NumericJensenShannon),
    Registered(FeatureKind.CATEGORICAL, DEFAULT, CategoricalDefault, reported=False),
    Registered(FeatureKind.CATEGORICAL, "chi_square", ChiSquare),
    Registered(FeatureKind.CATEGORICAL, "jensen_shannon", CategoricalJensenShannon),
    Registered(FeatureKind.CATEGORICAL, "psi", CategoricalPSI),
    Registered(FeatureKind.CATEGORICAL, "unseen_categories", UnseenCategories),
)


def choices(kind: FeatureKind | str) -> list[str]:
    """The names a ``kind`` feature's test can be chosen by, in registry order."""
    return [t.name for t in TESTS if t.kind == kind]


def lookup(kind: FeatureKind | str, name: str) -> type[DriftTest[Any]]:
    """The test class called ``name`` for a ``kind`` feature; ValueError naming the choices otherwise."""
    for t in TESTS:
        if t.kind == kind and t.name == name:
            return t.test
    raise ValueError(f"unknown {kind} test {name!r}; choose from {sorted(choices(kind))}")


def reported_names(kind: FeatureKind | str) -> tuple[str, ...]:
    """The statistics every report shows for a ``kind`` feature, in the order they are computed."""
    return tuple(t.name for t in TESTS if t.kind == kind and t.reported)


def statistics(kind: FeatureKind | str, reference: Any, current: Any) -> dict[str, TestResult]:
    """Every reported test of ``kind`` with its default settings, by name."""
    return {t.name: t.test()(reference, current) for t in TESTS if t.kind == kind and t.reported}
