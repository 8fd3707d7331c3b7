"""Rule kinds on real drift reports (pure), rule validation, fingerprints and silence matchers."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from alerts.config import parse_text
from alerts.labels import Matcher, fingerprint, matches_all, parse_matcher
from alerts.rules import DEFAULT_RULES, Finding, evaluate, evaluate_health, render, render_annotations
from alerts.specs import Kind, RuleSpec, parse_rule, parse_rules
from core.errors import Invalid
from core.health import CheckResult


def rule(kind: str, **values: Any) -> RuleSpec:
    return parse_rule({"name": f"r_{kind}", "kind": kind, **values}, path="rule")


def active(findings: Any) -> list[Any]:
    assert findings is not None
    return [f for f in findings if f.active]


# --- each kind on real reports ------------------------------------------------------------------------------


def test_dataset_drift(reports: dict[str, dict[str, Any]]) -> None:
    r = rule("dataset_drift")
    quiet, shifted = evaluate(r, reports["baseline"]), evaluate(r, reports["covariate_shift"])
    assert quiet is not None and len(quiet) == 1 and not quiet[0].active
    assert shifted is not None and len(shifted) == 1 and shifted[0].active
    share = reports["covariate_shift"]["dataset"]["share"]
    assert shifted[0].value == pytest.approx(share)
    assert set(shifted[0].evidence["drifted_features"]) >= {"age", "income", "credit_score"}


def test_feature_drift_one_alert_per_drifted_feature(reports: dict[str, dict[str, Any]]) -> None:
    every = evaluate(rule("feature_drift", params={"feature": "*"}), reports["covariate_shift"])
    assert every is not None and len(every) == len(reports["covariate_shift"]["features"])
    drifted = {f.labels["feature"] for f in active(every)}
    assert drifted == {f["name"] for f in reports["covariate_shift"]["features"] if f["drifted"]}
    assert {"age", "income", "credit_score"} <= drifted
    age = next(f for f in every if f.labels["feature"] == "age")
    assert age.evidence["p_value"] is not None and age.evidence["effect_name"]
    assert age.value is not None and age.value > 0
    one = evaluate(rule("feature_drift", params={"feature": "age"}), reports["baseline"])
    assert one is not None and [f.active for f in one] == [False]
    assert evaluate(rule("feature_drift", params={"feature": "nope"}), reports["baseline"]) is None


def test_harmful_drift_fires_on_harm_not_on_drift(reports: dict[str, dict[str, Any]]) -> None:
    r = rule("harmful_drift")
    # the covariate shift drifts the inputs but leaves the (true) model's ROC AUC alone
    covariate = evaluate(r, reports["covariate_shift"])
    assert covariate is not None and [f.active for f in covariate] == [False]
    assert reports["covariate_shift"]["dataset"]["drifted"] is True
    assert not active(evaluate(r, reports["baseline"]))
    (found,) = active(evaluate(r, reports["concept_drift"]))  # the labels' relation changed: it hurts
    e = found.evidence
    assert (e["estimate"], e["metric"]) == ("realised", "roc_auc")
    assert found.value == e["value"] and e["upper"] < e["limit"] == pytest.approx(
        e["reference"] - e["tolerance"]
    )
    assert (
        e["change"] < -e["tolerance"] and e["level"] == 0.05 and e["rows"] > 0 and "harmful" in e["message"]
    )
    summary = render_annotations(r, "credit", found)["summary"]
    assert summary.startswith("credit: harmful drift: realised roc_auc ") and "below the reference" in summary
    # the estimate named when no labels: the report's own figure
    estimated = copy.deepcopy(reports["concept_drift"])
    estimated["harm"] = {**estimated["harm"], "estimate": "cbpe"}
    summary = render_annotations(r, "credit", evaluate(r, estimated)[0])["summary"]  # type: ignore[index]
    assert "harmful drift: estimated (CBPE) roc_auc" in summary
    # no harm figure (a report stored before, no prediction): the alerts keep their state
    assert evaluate(r, {k: v for k, v in reports["concept_drift"].items() if k != "harm"}) is None
    with pytest.raises(Invalid, match=r"params\.metric: Extra inputs"):
        rule("harmful_drift", params={"metric": "roc_auc"})


def test_prediction_drift(reports: dict[str, dict[str, Any]]) -> None:
    r = rule("prediction_drift")
    assert not active(evaluate(r, reports["baseline"]))
    shifted = active(evaluate(r, reports["covariate_shift"]))
    assert len(shifted) == 1 and shifted[0].evidence["test"]
    no_prediction = {**reports["baseline"], "prediction": None}
    assert evaluate(r, no_prediction) is None


def test_performance_margin_and_below(reports: dict[str, dict[str, Any]]) -> None:
    concept = reports["concept_drift"]
    ref = concept["reference_performance"]["roc_auc"]
    margin = rule("performance", params={"metric": "roc_auc", "margin": 0.05})
    assert not active(evaluate(margin, reports["baseline"]))
    dropped = active(evaluate(margin, concept))
    assert len(dropped) == 1
    e = dropped[0].evidence
    assert (
        e["reference"] == pytest.approx(ref)
        and e["drop"] == pytest.approx(ref - e["value"])
        and e["drop"] > 0.05
    )
    assert e["label_coverage"] == pytest.approx(1.0)
    below = rule("performance", params={"metric": "accuracy", "below": 0.99})
    assert active(evaluate(below, reports["baseline"]))[0].evidence["below"] == 0.99
    assert not active(evaluate(rule("performance", params={"metric": "accuracy", "below": 0.5}), concept))
    unlabelled = {**reports["baseline"], "performance": None}
    assert evaluate(margin, unlabelled) is None  # no labels yet: the rule cannot say


def test_performance_of_a_regression_fires_when_rmse_grows() -> None:
    ref = {"rows": 2000.0, "mae": 1.0, "rmse": 1.3, "r2": 0.8}
    quiet = {
        "performance": {"rows": 500, "mae": 1.02, "rmse": 1.32, "r2": 0.79},
        "reference_performance": ref,
    }
    worse = {"performance": {"rows": 500, "mae": 1.6, "rmse": 2.1, "r2": 0.5}, "reference_performance": ref}
    rmse = rule("performance", params={"metric": "rmse", "margin": 0.1})  # 10 % above the reference's RMSE
    assert not active(evaluate(rmse, quiet))
    (fired,) = active(evaluate(rmse, worse))
    assert (
        fired.value == 2.1
        and fired.evidence["reference"] == 1.3
        and fired.evidence["drop"] == pytest.approx(-0.8)
    )
    assert "above the reference" in render_annotations(rmse, "m", fired)["summary"]
    above = rule("performance", params={"metric": "mae", "above": 1.5})
    assert not active(evaluate(above, quiet)) and active(evaluate(above, worse))
    # the default rules' roc_auc stands for the task's own metric: rmse here, macro_f1 on a multi-class model
    default = next(r for r in DEFAULT_RULES if r.name == "performance_drop")
    (found,) = active(evaluate(default, worse))
    assert found.evidence["metric"] == "rmse"
    multi = {
        "performance": {"rows": 400, "accuracy": 0.6, "macro_f1": 0.5},
        "reference_performance": {"macro_f1": 0.7},
    }
    (found,) = active(evaluate(default, multi))
    assert found.evidence["metric"] == "macro_f1" and found.evidence["drop"] == pytest.approx(0.2)
    for params, part in [
        ({"metric": "rmse", "below": 1.0}, "bound it with 'above'"),
        ({"metric": "macro_f1", "above": 0.5}, "bound it with 'below'"),
        ({"metric": "rmse", "above": 1.0, "margin": 0.1}, "not above and margin"),
    ]:
        with pytest.raises(Invalid, match=part):
            rule("performance", params=params)


def test_estimated_performance_misses_concept_drift(reports: dict[str, dict[str, Any]]) -> None:
    """CBPE assumes P(y|x) is fixed: the estimated rule stays quiet where the realised one fires."""
    est = rule("estimated_performance", params={"margin": 0.05})
    assert est.params == {"metric": "roc_auc", "below": None, "above": None, "margin": 0.05}
    assert not active(evaluate(est, reports["concept_drift"]))
    assert active(evaluate(rule("performance"), reports["concept_drift"]))  # default margin 0.05
    strict = rule("estimated_performance", params={"below": 0.999})
    assert active(evaluate(strict, reports["baseline"]))


def test_a_performance_rule_without_a_bound_compares_with_the_reports_limits() -> None:
    """The default rule: worse than the limit the engine drew from the reference's chunks; a report without
    limits (an older profile) falls back to a margin of 0.05; a rule's own margin wins over the limits."""
    auto = rule("performance")
    doc: dict[str, Any] = {
        "performance": {"roc_auc": 0.80, "rows": 1000.0},
        "reference_performance": {"roc_auc": 0.85},
        "performance_limits": {"roc_auc": 0.82},
    }
    (found,) = evaluate(auto, doc) or []
    assert found.active and found.evidence["limit"] == 0.82 and "margin" not in found.evidence
    (found,) = evaluate(auto, {**doc, "performance_limits": {"roc_auc": 0.79}}) or []
    assert not found.active
    older = {k: v for k, v in doc.items() if k != "performance_limits"}
    (found,) = evaluate(auto, older) or []
    assert not found.active and found.evidence["margin"] == 0.05  # a drop of 0.05 is not more than 0.05
    (found,) = evaluate(auto, {**older, "performance": {"roc_auc": 0.79, "rows": 1000.0}}) or []
    assert found.active
    own = rule("performance", params={"margin": 0.1})
    (found,) = evaluate(own, doc) or []
    assert not found.active and found.evidence["margin"] == 0.1
    rmse = rule("estimated_performance", params={"metric": "rmse"})
    regression = {
        "estimated_performance": {"rmse": 1.3, "rows": 500.0},
        "reference_performance": {"rmse": 1.0},
        "estimated_performance_limits": {"rmse": 1.2},
    }
    (found,) = evaluate(rmse, regression) or []
    assert found.active and found.evidence["limit"] == 1.2


def test_data_quality_unseen_category(reports: dict[str, dict[str, Any]]) -> None:
    r = rule("data_quality", params={"check": "unseen_category", "above": 0.05})
    assert not active(evaluate(r, reports["baseline"]))
    hit = active(evaluate(r, reports["new_category"]))
    assert [f.labels for f in hit] == [{"feature": "loan_purpose", "check": "unseen_category"}]
    assert 0.1 < hit[0].value < 0.2  # 15 % of rows planted as "crypto"
    higher = rule("data_quality", params={"check": "unseen_category", "above": 0.5})
    assert not active(evaluate(higher, reports["new_category"]))
    other = rule("data_quality", params={"check": "missing", "feature": "no_such_feature"})
    assert evaluate(other, reports["baseline"]) is None
    # without `above`: the report's own verdict on the check, whatever the share
    verdict = rule("data_quality", params={"check": "unseen_category"})
    assert not active(evaluate(verdict, reports["baseline"]))
    (flagged,) = active(evaluate(verdict, reports["new_category"]))
    assert flagged.labels["feature"] == "loan_purpose" and flagged.evidence["flagged"] is True
    doc = {"quality": [{"feature": "f", "check": "unseen_category", "rate": 0.9, "flagged": False}]}
    assert not active(evaluate(verdict, doc))  # a high share the report does not flag (a rare category)
    assert active(evaluate(r, doc))  # a fixed share does


def test_concept_drift(reports: dict[str, dict[str, Any]]) -> None:
    r = rule("concept_drift")
    assert not active(evaluate(r, reports["baseline"]))
    hit = active(evaluate(r, reports["concept_drift"]))
    assert len(hit) == 1 and hit[0].evidence["detector"] == "page_hinkley" and hit[0].value >= 1


def test_health_rule() -> None:
    r = rule("health", for_runs=2)
    assert r.params == {"check": "model:{model}"}

    def result(ok: bool) -> CheckResult:
        return CheckResult("model:credit", ok, "loaded" if ok else "not loaded", 0.01, None, 0.0)

    assert evaluate_health(r, {"model:credit": result(True)}, "credit")[0].active is False  # type: ignore[index]
    down = evaluate_health(r, {"model:credit": result(False)}, "credit")
    assert down is not None and down[0].active and down[0].evidence["detail"] == "not loaded"
    assert evaluate_health(r, {"model:other": result(False)}, "credit") is None
    disk = rule("health", params={"check": "disk:registry"})
    found = evaluate_health(disk, {"disk:registry": result(False)}, "credit")
    assert found is not None and found[0].labels == {"check": "disk:registry"}


def test_defaults_cover_every_kind_sensibly() -> None:
    by_name = {r.name: r for r in DEFAULT_RULES}
    assert {r.kind for r in DEFAULT_RULES} == set(Kind)
    # only harmful drift retrains: drift that leaves performance alone notifies (issue 42)
    assert [r.name for r in DEFAULT_RULES if "retrain" in r.actions] == ["harmful_drift"]
    assert (
        by_name["harmful_drift"].actions == ["notify", "retrain"] and by_name["harmful_drift"].for_runs == 1
    )
    assert by_name["harmful_drift"].severity == "critical"
    assert by_name["dataset_drift"].actions == ["notify"] and by_name["dataset_drift"].for_runs == 1
    assert by_name["performance_drop"].severity == "critical"
    assert by_name["performance_drop"].actions == ["notify"]
    assert by_name["performance_drop"].params["margin"] is None  # the report's limits (monitors/horizon.py)
    assert by_name["estimated_performance_drop"].params["margin"] is None
    assert by_name["model_unhealthy"].for_runs == 2 and by_name["model_unhealthy"].severity == "critical"
    assert by_name["feature_drift"].severity == "info" and by_name["feature_drift"].actions == ["notify"]
    # the report's verdict on the check (significant at the run's level), not a fixed share
    assert by_name["unseen_categories"].params == {"check": "unseen_category", "above": None, "feature": "*"}


def test_annotations_render_templates_and_keep_unknown_names(reports: dict[str, dict[str, Any]]) -> None:
    r = rule(
        "dataset_drift",
        annotations={"summary": "{model}: {share:.0%} drifted", "description": "see {nope} and {value:.2f}"},
    )
    finding = evaluate(r, reports["covariate_shift"])[0]  # type: ignore[index]
    out = render_annotations(r, "credit", finding)
    assert out["summary"] == "credit: 30% drifted"
    assert out["description"] == f"see {{nope}} and {finding.value:.2f}"
    assert render("{value:.3f}", {"value": None}) == "{value:.3f}"  # a bad format keeps the template
    plain = render_annotations(rule("dataset_drift"), "credit", finding)
    assert plain["summary"].startswith("credit: the input data drifted (30% of features")


# --- validation ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ({"name": "x", "kind": "nope"}, r"^rules\[0\]\.kind: Input should be 'dataset_drift'"),
        ({"name": "x", "kind": "dataset_drift", "for": 0}, r"^rules\[0\]\.for: Input should be greater"),
        ({"name": "x", "kind": "dataset_drift", "severity": "page"}, r"^rules\[0\]\.severity: "),
        ({"name": "x", "kind": "dataset_drift", "actions": ["page"]}, r"^rules\[0\]\.actions\[0\]: "),
        ({"name": "x", "kind": "dataset_drift", "when": 1}, r"^rules\[0\]\.when: Extra inputs"),
        (
            {"name": "x", "kind": "dataset_drift", "params": {"feature": "a"}},
            r"^rules\[0\]\.params\.feature: Extra",
        ),
        (
            {"name": "x", "kind": "performance", "params": {"below": 0.9, "margin": 0.1}},
            r"^rules\[0\]\.params: give",
        ),
        ({"name": "x", "kind": "performance", "params": {"margin": 2}}, r"^rules\[0\]\.params\.margin: "),
        ({"name": "x", "kind": "data_quality"}, r"^rules\[0\]\.params\.check: Field required"),
        (
            {"name": "x", "kind": "dataset_drift", "labels": {"model": "m"}},
            r"^rules\[0\]\.labels: .*reserved",
        ),
        ({"name": "x", "kind": "retrain_rejected", "actions": ["retrain"]}, r"^rules\[0\]: .*cannot retrain"),
        ({"name": "bad name", "kind": "dataset_drift"}, r"^rules\[0\]\.name: String should match"),
        ({"kind": "dataset_drift"}, r"^rules\[0\]\.name: Field required"),
    ],
)
def test_a_bad_rule_is_named_by_its_path(item: dict[str, Any], message: str) -> None:
    with pytest.raises(Invalid, match=message):
        parse_rules([item], path="rules")


def test_rule_names_are_unique_and_the_rule_is_named() -> None:
    with pytest.raises(Invalid, match=r"rules\[1\]\.name: 'a' is already the name of rules\[0\]"):
        parse_rules(
            [{"name": "a", "kind": "dataset_drift"}, {"name": "a", "kind": "concept_drift"}], path="rules"
        )
    with pytest.raises(Invalid, match=r"\(rule 'drift'\)$"):
        parse_rules([{"name": "drift", "kind": "dataset_drift", "for": "x"}], path="rules")
    with pytest.raises(Invalid, match=r"^rules: must be a list of rules, got dict"):
        parse_rules({"name": "a"}, path="rules")


def test_rules_file_errors_name_the_file_the_path_and_the_rule() -> None:
    good = (
        "models:\n  credit:\n    - {name: drift, kind: dataset_drift, for: 2, actions: [notify, retrain]}\n"
    )
    parsed = parse_text(good, where="rules.yml")
    assert parsed["credit"][0].for_runs == 2 and parsed["credit"][0].actions == ["notify", "retrain"]
    bad_for = (
        "models:\n  credit:\n    - {name: a, kind: concept_drift}\n"
        "    - {name: drift, kind: dataset_drift, for: 0}\n"
    )
    with pytest.raises(Invalid, match=r"^rules\.yml: models\.credit\[1\]\.for: .*\(rule 'drift'\)$"):
        parse_text(bad_for, where="rules.yml")
    with pytest.raises(Invalid, match=r"^rules\.yml: not valid YAML at line 2, column 1: found character"):
        parse_text("models:\n\tcredit: []\n", where="rules.yml")
    with pytest.raises(Invalid, match=r"^rules\.yml: the document must be a mapping with one key 'models'"):
        parse_text("rules: []\n", where="rules.yml")
    with pytest.raises(Invalid, match=r"^rules\.yml: models\.bad name: .*model name"):
        parse_text("models:\n  bad name: []\n", where="rules.yml")
    wildcard = parse_text("models:\n  '*': [{name: perf, kind: performance}]\n", where="r.yml")
    assert wildcard["*"][0].params["margin"] is None  # no bound given: the report's limits


# --- fingerprints and matchers ------------------------------------------------------------------------------


def test_fingerprint_is_stable_and_order_free() -> None:
    a = {"alertname": "drift", "model": "credit", "severity": "warning", "feature": "age"}
    b = dict(reversed(list(a.items())))
    assert fingerprint(a) == fingerprint(b) and len(fingerprint(a)) == 16
    assert fingerprint(a) != fingerprint({**a, "feature": "income"})
    assert fingerprint(copy.deepcopy(a)) == fingerprint(a)


@pytest.mark.parametrize(
    ("text", "labels", "hit"),
    [
        ("model=credit", {"model": "credit"}, True),
        ("model=credit", {"model": "credit2"}, False),
        ("model!=credit", {"model": "other"}, True),
        ("severity=~warn.*|critical", {"severity": "warning"}, True),
        ("severity=~warn", {"severity": "warning"}, False),  # full match, as in Alertmanager
        ("feature!~age|income", {"feature": "debt"}, True),
        ('model="credit"', {"model": "credit"}, True),
        ("feature=", {"model": "credit"}, True),  # an absent label is the empty string
    ],
)
def test_matchers_like_alertmanager(text: str, labels: dict[str, str], hit: bool) -> None:
    assert parse_matcher(text).matches(labels) is hit


def test_bad_matchers_are_refused() -> None:
    with pytest.raises(Invalid, match="has no operator"):
        parse_matcher("model")
    with pytest.raises(Invalid, match="not a valid regular expression"):
        parse_matcher("model=~(")
    with pytest.raises(Invalid, match="not a label name"):
        parse_matcher("1x=a")
    assert not matches_all([], {"model": "credit"})
    assert matches_all(
        [Matcher("model", "credit"), Matcher("severity", "info", is_equal=False)], {"model": "credit"}
    )


CATASTROPHIC = (  # patterns that make a backtracking engine take exponential time on a near-miss
    r"(a+)+$",
    r"(a|aa)+$",
    r"(a|a?)+$",
    r"(a*)*b",
    r"(.*a){20}",
    r"(\w+\s?)+$",
    r"^(([a-z])+.)+[A-Z]([a-z])+$",
    r"(x+x+)+y",
)


@pytest.mark.timeout(120)  # Python's backtracking re needed seconds for one such label, hours for these
@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_catastrophic_patterns_match_adversarial_labels_in_linear_time(pattern: str) -> None:
    matcher = parse_matcher(f"model=~{pattern}")
    labels = [{"model": "a" * (20 + i % 40) + "!"} for i in range(10_000)]  # each a near miss
    assert not any(matcher.matches(one) for one in labels)
    assert parse_matcher(f"model!~{pattern}").matches(labels[-1])


def test_regex_matchers_are_re2_as_in_alertmanager() -> None:
    assert parse_matcher(r"model=~(a+)+$").matches({"model": "aaaa"})
    assert parse_matcher(r"model=~cred(it|o)").matches({"model": "credo"})
    assert parse_matcher(r"model=~[a-z0-9_-]{1,64}").matches({"model": "fraud-v2"})
    for backtracking in (r"(a)\1", r"(?=a)a", r"(?<!x)a"):  # need a backtracking engine: refused
        with pytest.raises(Invalid, match="not a valid regular expression in RE2 syntax") as err:
            parse_matcher(f"model=~{backtracking}")
        assert "backreferences and lookarounds are not supported" in str(err.value)
    with pytest.raises(Invalid, match="the value has 1025 characters; at most 1024"):
        parse_matcher("model=~" + "a" * 1025)


@pytest.mark.parametrize(
    ("template", "words"),
    [
        ("{value:>2000000}", "asks for 2000000 characters or digits; at most 100"),
        ("{value:>999999999}", "at most 100"),
        ("{value:.500f}", "asks for 500 characters or digits"),
        ("{value:{width}}", "nests a field in its format"),
        ("{value.__class__}", "is not a plain name"),
        ("{0}", "is not a plain name"),
        ("{model", "not a template"),
        ("x" * 2001, "2001 characters; a template has at most 2000"),
    ],
)
def test_annotation_templates_are_bounded(template: str, words: str) -> None:
    with pytest.raises(Invalid) as err:
        rule("dataset_drift", annotations={"summary": template})
    assert str(err.value).startswith("rule.annotations: ") and "summary: " in str(err.value)
    assert words in str(err.value)


def test_a_rendered_annotation_is_bounded_whatever_the_labels() -> None:
    spec = rule("dataset_drift", annotations={"summary": "{model} {value:>100} {feature}"})
    huge = Finding(True, 0.5, {}, {"feature": "x" * 10_000})  # a label value as long as a client sent it
    summary = render_annotations(spec, "credit", huge)["summary"]
    assert summary.startswith("credit ") and len(summary) == 4096 and summary.endswith("…")
    assert render("{value:.3f} of {model}", {"value": 0.12345, "model": "credit"}) == "0.123 of credit"
