"""``alerts.lifecycle.is_firing``, the one rule of when an open alert fires (the lifecycle's database code and
the backtest's in-memory replay both follow it): a new alert (its first active evaluation) fires at once when
its rule's ``for_runs`` is 1, otherwise it is pending until ``for_runs`` consecutive active evaluations; a
firing alert stays firing."""

from __future__ import annotations

import pytest

from alerts.lifecycle import is_firing


def _sequence(for_runs: int, evaluations: int) -> list[bool]:
    """Whether the alert fires after each of ``evaluations`` consecutive active evaluations (1, 2, ...)."""
    firing, out = False, []
    for active_runs in range(1, evaluations + 1):
        firing = is_firing(firing=firing, active_runs=active_runs, for_runs=for_runs)
        out.append(firing)
    return out


@pytest.mark.parametrize(
    ("for_runs", "expected"),
    [
        (1, [True, True, True, True]),  # fires on its first evaluation
        (2, [False, True, True, True]),  # pending once, fires on the second
        (3, [False, False, True, True]),  # pending twice, fires on the third
    ],
)
def test_an_alert_fires_after_for_runs_consecutive_active_evaluations(
    for_runs: int, expected: list[bool]
) -> None:
    assert _sequence(for_runs, len(expected)) == expected


@pytest.mark.parametrize("for_runs", [1, 2, 3])
def test_a_new_alert_fires_at_once_only_when_for_runs_is_one(for_runs: int) -> None:
    assert is_firing(firing=False, active_runs=1, for_runs=for_runs) is (for_runs == 1)


@pytest.mark.parametrize(("active_runs", "for_runs"), [(1, 3), (2, 3), (3, 3), (1, 1)])
def test_a_firing_alert_stays_firing(active_runs: int, for_runs: int) -> None:
    assert is_firing(firing=True, active_runs=active_runs, for_runs=for_runs) is True


def test_a_pending_alert_fires_on_exactly_the_for_runs_th_evaluation() -> None:
    assert not is_firing(firing=False, active_runs=2, for_runs=3)
    assert is_firing(firing=False, active_runs=3, for_runs=3)
