"""A retrained candidate whose contract breaks the serving version's clients is held for a person (issue 40).

The labelled window never holds the category ``business`` of ``loan_purpose``, so the candidate trained on it
drops a category its clients send: the gate's ``input_contract`` check states the change and is undecided,
the job ends ``undecided`` with the candidate staged, and ``promote`` refuses it unless accepted.
"""

from __future__ import annotations

import pytest

from predictions.service import record_feedback
from registry.models import VersionState
from registry.service import ContractBreak, promote
from tests.predictions.logdata import log_columns
from tests.support import CREDIT_FEATURES
from tests.training.test_retrain_flow import ROWS, World, world  # noqa: F401 (world: the fixture)
from training.datagen import TARGET, generate
from training.models import JobState
from training.worker import Worker


def test_a_candidate_that_drops_a_category_clients_send_is_held_for_a_person(world: World) -> None:  # noqa: F811
    cols = generate(ROWS, scenario="concept_drift", seed=11)
    purpose = cols["loan_purpose"].copy()
    purpose[purpose == "business"] = "car"
    cols["loan_purpose"] = purpose
    ids = log_columns(world.db.engine, cols, features=CREDIT_FEATURES, model="credit", version=1)
    with world.db.session() as s:
        record_feedback(
            session=s,
            model_name="credit",
            labels=[(pid, float(y)) for pid, y in zip(ids, cols[TARGET], strict=True)],
        )
    job_id = world.submit(reason="concept drift")
    Worker(db=world.db, settings=world.settings).run_once()

    job = world.job(job_id)
    assert job.state is JobState.UNDECIDED, job.error or job.log_tail
    assert world.serving() == 1 and world.version(3).state is VersionState.STAGED
    assert job.gate is not None
    checks = {c["name"]: c for c in job.gate["checks"]}
    contract = checks["input_contract"]
    assert contract["verdict"] == "undecided", contract
    assert "BREAKING: input 'loan_purpose' categories dropped: [business]" in contract["message"]
    assert [c["kind"] for c in contract["figures"]["contract_changes"] if c["breaking"]] == [
        "categories_dropped"
    ]
    assert "driftwarden models promote credit 3 --accept-contract-change" in job.log_tail

    with world.db.session() as s, pytest.raises(ContractBreak, match=r"categories dropped: \[business\]"):
        promote(session=s, model_name="credit", version=3)
    assert world.serving() == 1
    with world.db.session() as s:
        promote(session=s, model_name="credit", version=3, accept_contract_change=True)
    assert world.serving() == 3
