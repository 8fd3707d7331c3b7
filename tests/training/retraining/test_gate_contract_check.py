"""A retrained candidate's contract changes are stated by the gate (issue 40).

The labelled window never holds the category ``business`` of ``loan_purpose``, so the candidate trained on it
drops a category its clients send. Under the contract's ``flag`` policy such a request is still answered
(the value flagged as unseen), so the change is stated as compatible and the job promotes; under ``reject``
(refused requests) it breaks clients, and the gate's ``input_contract`` check is then undecided
(tests/registry/test_contract_changes.py). A breaking change ends the job ``undecided`` with the candidate
staged, and ``promote`` refuses it unless accepted: tests/service/test_first_day.py (a retrained imported
model, whose TF Serving signature changes).
"""

from __future__ import annotations

from predictions.service import record_feedback
from tests.predictions.logdata import log_columns
from tests.support import CREDIT_FEATURES
from tests.training.retraindata import ROWS, World
from training.cluster.datagen import TARGET, generate
from training.retraining.models import JobState
from training.retraining.worker import Worker


def test_a_candidate_that_drops_a_category_under_policy_flag_states_it_and_promotes(world: World) -> None:  # noqa: F811
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
    assert job.state is JobState.PROMOTED, job.error or job.log_tail
    assert world.serving() == 3
    assert job.gate is not None
    checks = {c["name"]: c for c in job.gate["checks"]}
    contract = checks["input_contract"]
    assert contract["verdict"] == "passed", contract
    assert "changes for the serving version's clients" in contract["message"]
    assert "BREAKING" not in contract["message"]
    dropped = [c for c in contract["figures"]["contract_changes"] if c["kind"] == "categories_dropped"]
    assert [(c["subject"], c["breaking"], c["before"]) for c in dropped] == [
        ("loan_purpose", False, ["business"])
    ]
    assert "flagged as unseen, still answered" in dropped[0]["text"]
