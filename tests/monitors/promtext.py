"""Reading a Prometheus text exposition back: samples by name and labels."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

Sample = tuple[str, tuple[tuple[str, str], ...]]  # metric name, sorted labels


def parse(text: str) -> dict[Sample, float]:
    """Every sample of a Prometheus text exposition, by name and labels."""
    out: dict[Sample, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in out, f"duplicate series {key}"
            out[key] = s.value
    return out


def series(samples: dict[Sample, float], name: str, **match: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples of ``name`` whose labels include ``match``."""
    return {
        labels: v
        for (n, labels), v in samples.items()
        if n == name and all((k, val) in labels for k, val in match.items())
    }
