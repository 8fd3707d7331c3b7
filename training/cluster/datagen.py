"""A realistic, seeded credit-risk table with named drift scenarios.

Each row is a loan application; the target ``default`` is 1 when the loan defaulted. The
scenarios change one thing each, so a monitor's verdict can be checked against what was planted:

- ``baseline``: the training distribution.
- ``covariate_shift``: lower incomes, older applicants, lower credit scores; same P(y | x).
- ``new_category``: ``loan_purpose`` gains the unseen category ``crypto`` (15 % of rows).
- ``prior_shift``: the default rate rises (P(y) changes, P(x | y) does not).
- ``concept_drift``: same inputs, a different P(y | x): debt stops mattering, age starts to.

The same applicants and the same latent risk give the other tasks' targets (``task``): multi-class
``risk_band`` (``low``, ``medium``, ``high``: the default log-odds plus logistic noise, cut in three) and
regression ``loss_amount`` (the expected loss in thousands: loan amount x P(default) x 60 % loss given
default, plus noise, never below 0). Their ``prior_shift`` draws more of the riskier outcomes.
"""

from __future__ import annotations

import enum

import numpy as np

from core.tabular import Columns
from registry.schema import Task

TARGET = "default"
TARGETS = {Task.BINARY: TARGET, Task.MULTICLASS: "risk_band", Task.REGRESSION: "loss_amount"}
"""The target column of each task's table."""
BANDS = ("low", "medium", "high")
BAND_CUTS = (-5.0, 0.0)  # latent risk (log-odds + logistic noise) below -5: low, below 0: medium, else high
LOSS_GIVEN_DEFAULT = 0.6
LOSS_NOISE = 0.5  # thousands
HOME = ("RENT", "MORTGAGE", "OWN")
HOME_P = (0.4, 0.4, 0.2)
PURPOSE = ("debt_consolidation", "credit_card", "home_improvement", "car", "education", "medical", "business")
PURPOSE_P = (0.35, 0.2, 0.15, 0.12, 0.08, 0.05, 0.05)
REGION = ("north", "south", "east", "west")
PURPOSE_RISK = {
    "debt_consolidation": 0.2,
    "credit_card": 0.0,
    "home_improvement": -0.4,
    "car": -0.3,
    "education": 0.3,
    "medical": 0.5,
    "business": 0.9,
    "crypto": 1.2,
}


class Scenario(enum.StrEnum):
    BASELINE = "baseline"
    COVARIATE_SHIFT = "covariate_shift"
    NEW_CATEGORY = "new_category"
    PRIOR_SHIFT = "prior_shift"
    CONCEPT_DRIFT = "concept_drift"


def _features(rng: np.random.Generator, n: int, scenario: Scenario, severity: float) -> Columns:
    shift = severity if scenario is Scenario.COVARIATE_SHIFT else 0.0
    age = np.clip(np.round(rng.normal(42 + 6 * shift, 12, n)), 18, 90).astype(np.int64)
    income = np.round(rng.lognormal(10.8 - 0.25 * shift, 0.45, n), 2)
    dti = np.round(rng.beta(2, 5, n) * 0.8, 4)
    score = np.clip(np.round(rng.normal(680 - 30 * shift, 60, n)), 300, 850).astype(np.int64)
    loan = np.round(rng.lognormal(9.5, 0.6, n), 2)
    emp = np.round(np.clip(rng.exponential(6, n), 0, 45), 1)
    emp[rng.random(n) < 0.03] = np.nan
    accounts = rng.poisson(5, n).astype(np.int64)
    home = rng.choice(np.array(HOME, dtype=object), n, p=HOME_P)
    purpose = rng.choice(np.array(PURPOSE, dtype=object), n, p=PURPOSE_P)
    if scenario is Scenario.NEW_CATEGORY:
        purpose[rng.random(n) < 0.15 * severity] = "crypto"
    region = rng.choice(np.array(REGION, dtype=object), n)
    return {
        "age": age,
        "income": income,
        "debt_to_income": dti,
        "credit_score": score,
        "loan_amount": loan,
        "employment_years": emp,
        "num_open_accounts": accounts,
        "home_ownership": home,
        "loan_purpose": purpose,
        "region": region,
    }


def default_logit(cols: Columns, *, concept: bool = False) -> np.ndarray:
    """The true log-odds of default (the concept the model has to learn)."""
    score = (cols["credit_score"] - 680.0) / 60.0
    dti = (cols["debt_to_income"] - 0.23) / 0.13
    lti = np.log(cols["loan_amount"] / cols["income"]) + 1.3
    emp = np.nan_to_num((cols["employment_years"] - 6.0) / 6.0, nan=0.5)
    age = (cols["age"] - 42.0) / 12.0
    rent = (cols["home_ownership"] == "RENT").astype(float)
    purpose = np.array([PURPOSE_RISK[p] for p in cols["loan_purpose"]])
    if concept:
        return -2.5 - 1.8 * score + 3.6 * age + 2.2 * lti - 1.2 * emp + 0.9 * rent + 3.0 * purpose
    return -3.2 - 3.9 * score + 3.3 * dti + 2.2 * lti - 1.2 * emp - 0.45 * age + 0.9 * rent + 3.0 * purpose


def generate(
    rows: int,
    *,
    scenario: Scenario | str = Scenario.BASELINE,
    seed: int = 0,
    severity: float = 1.0,
    task: Task | str = Task.BINARY,
) -> Columns:
    """Generate ``rows`` applications under ``scenario`` with the ``task``'s target (:data:`TARGETS`);
    the same seed gives the same table."""
    scenario = Scenario(scenario)
    task = task if isinstance(task, Task) else Task.parse(task)
    if rows <= 0:
        raise ValueError("rows must be positive")
    rng = np.random.default_rng(seed)
    if task is not Task.BINARY:
        return _generate_other(rng, rows, scenario=scenario, severity=severity, task=task)
    if scenario is Scenario.PRIOR_SHIFT:
        pool = _features(rng, rows * 4, scenario, severity)
        y = (rng.random(rows * 4) < _sigmoid(default_logit(pool))).astype(np.int64)
        target_rate = min(0.9, float(y.mean()) + 0.2 * severity)
        n_pos = int(round(rows * target_rate))
        pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
        idx = np.concatenate(
            [rng.choice(pos, n_pos, replace=n_pos > pos.size), rng.choice(neg, rows - n_pos)]
        )
        rng.shuffle(idx)
        cols = {k: v[idx] for k, v in pool.items()}
        cols[TARGET] = y[idx]
        return cols
    cols = _features(rng, rows, scenario, severity)
    logit = default_logit(cols, concept=scenario is Scenario.CONCEPT_DRIFT)
    cols[TARGET] = (rng.random(rows) < _sigmoid(logit)).astype(np.int64)
    return cols


def _generate_other(
    rng: np.random.Generator, rows: int, *, scenario: Scenario, severity: float, task: Task
) -> Columns:
    """The multi-class and regression tables: the same applicants and latent risk as the binary one."""
    prior = scenario is Scenario.PRIOR_SHIFT
    n = rows * 4 if prior else rows
    cols = _features(rng, n, scenario, severity)
    logit = default_logit(cols, concept=scenario is Scenario.CONCEPT_DRIFT)
    y: np.ndarray
    if task is Task.MULTICLASS:
        risk = logit + rng.logistic(size=n)
        y = np.array(BANDS, dtype=object)[np.searchsorted(BAND_CUTS, risk, side="right")]
        weight = np.select([y == "high", y == "medium"], [1.0 + 2.0 * severity, 1.0 + 0.5 * severity], 1.0)
    else:
        loss = cols["loan_amount"] / 1000.0 * LOSS_GIVEN_DEFAULT * _sigmoid(logit)
        y = np.round(np.maximum(0.0, loss + rng.normal(0.0, LOSS_NOISE, n)), 3)
        weight = 1.0 + 2.0 * severity * (y > np.quantile(y, 0.7))
    if prior:  # P(y) moves towards the riskier outcomes, P(x | y) does not
        idx = rng.choice(n, rows, replace=False, p=weight / weight.sum())
        cols = {k: v[idx] for k, v in cols.items()}
        y = y[idx]
    cols[TARGETS[task]] = y
    return cols


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))
