"""Issue 40, item 10: per-class metrics are named by class in every report and series (``recall[low]``, the
form of the report's ``prediction[low]``), not by class index (``recall_0``); profiles and reports stored
before with ``recall_<k>`` still read."""

from __future__ import annotations

import re

from monitors.html import performance_keys, render_html
from monitors.performance import class_named, metrics_for
from monitors.profile import build_reference_profile
from monitors.report import report_from_dict
from registry.schema import Task, infer_schema, label_codes
from tests.monitors.references import CLASSES, _window, multiclass_reference

NAMED = {f"recall[{c}]" for c in CLASSES}
INDEXED = re.compile(r"recall_\d")


def test_class_named_names_per_class_metrics_and_keeps_the_rest() -> None:
    flat = {"rows": 3.0, "accuracy": 0.5, "recall_0": 1.0, "recall_1": 0.0, "recall_2": 0.5, "recall_7": 0.1}
    named = class_named(flat, CLASSES)
    assert named == {
        "rows": 3.0,
        "accuracy": 0.5,
        "recall[low]": 1.0,
        "recall[mid]": 0.0,
        "recall[high]": 0.5,
        "recall_7": 0.1,  # no such class: kept as stored
    }
    assert class_named(named, CLASSES) == named


def test_a_multiclass_report_and_profile_name_recall_by_class() -> None:
    cols, prob = multiclass_reference(3_000)
    schema = infer_schema(cols, target="label", task=Task.MULTICLASS, classes=CLASSES)
    labels = label_codes(cols["label"], schema.classes)
    doc = build_reference_profile(cols, schema, predictions=prob, labels=labels)
    assert set(doc["performance"]) >= NAMED and not any(INDEXED.match(k) for k in doc["performance"])
    assert (
        metrics_for(Task.MULTICLASS, y_true=labels, predictions=prob, classes=CLASSES) == doc["performance"]
    )

    report = _window(doc, prob[:1_000], labels[:1_000])
    realised, reference = report.performance or {}, report.reference_performance or {}
    assert set(realised) >= NAMED and set(reference) >= NAMED, (realised, reference)
    assert not any(INDEXED.match(k) for k in (*realised, *reference))
    outputs = {f.name for f in report.outputs}
    assert {f"prediction[{c}]" for c in CLASSES} <= outputs  # the same form as the outputs' names
    assert performance_keys(report)[-3:] == ("recall[low]", "recall[mid]", "recall[high]")
    page = render_html(report)
    assert all(f"recall[{c}]" in page for c in CLASSES) and "recall_0" not in page


def test_a_profile_stored_before_is_read_with_its_recall_named() -> None:
    cols, prob = multiclass_reference(3_000)
    schema = infer_schema(cols, target="label", task=Task.MULTICLASS, classes=CLASSES)
    labels = label_codes(cols["label"], schema.classes)
    doc = build_reference_profile(cols, schema, predictions=prob, labels=labels)
    old = {f"recall_{k}": doc["performance"][f"recall[{c}]"] for k, c in enumerate(CLASSES)}
    doc["performance"] = {k: v for k, v in doc["performance"].items() if not k.startswith("recall")} | old
    report = _window(doc, prob[:1_000], labels[:1_000])
    reference = report.reference_performance or {}
    assert {k: reference[k] for k in NAMED} == {
        f"recall[{c}]": old[f"recall_{k}"] for k, c in enumerate(CLASSES)
    }


def test_a_report_stored_before_still_renders_its_recalls() -> None:
    cols, prob = multiclass_reference(3_000)
    schema = infer_schema(cols, target="label", task=Task.MULTICLASS, classes=CLASSES)
    labels = label_codes(cols["label"], schema.classes)
    doc = build_reference_profile(cols, schema, predictions=prob, labels=labels)
    stored = _window(doc, prob[:1_000], labels[:1_000]).as_dict()
    indexed = {f"recall[{c}]": f"recall_{k}" for k, c in enumerate(CLASSES)}  # as a run stored them before
    for part in ("performance", "reference_performance"):
        stored[part] = {indexed.get(k, k): v for k, v in stored[part].items()}
    report = report_from_dict(stored)
    assert performance_keys(report)[-3:] == ("recall_0", "recall_1", "recall_2")
    page = render_html(report)  # the page names them by class, from the outputs' names
    assert all(f"recall[{c}]" in page for c in CLASSES) and "recall_" not in page


def test_the_performance_series_carry_the_class_names() -> None:
    from datetime import UTC, datetime

    from monitors.metrics import DriftFamilies, RunView

    cols, prob = multiclass_reference(3_000)
    schema = infer_schema(cols, target="label", task=Task.MULTICLASS, classes=CLASSES)
    labels = label_codes(cols["label"], schema.classes)
    doc = build_reference_profile(cols, schema, predictions=prob, labels=labels)
    report = _window(doc, prob[:1_000], labels[:1_000]).as_dict()
    families = DriftFamilies()
    families.add(RunView(1, "bands", datetime.now(UTC), 0.1, 1_000, report), max_features=10)
    shown = {
        (family.name, sample.labels["metric"])
        for family in families.families()
        for sample in family.samples
        if "metric" in sample.labels
    }
    for c in CLASSES:
        assert ("driftwarden_model_performance", f"recall[{c}]") in shown, shown
        assert ("driftwarden_model_reference_performance", f"recall[{c}]") in shown, shown
    assert not any(INDEXED.match(metric) for _, metric in shown)
