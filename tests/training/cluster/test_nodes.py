"""Cluster specs (``training.cluster.nodes.ClusterSpec``): parsed from JSON or a TF_CONFIG file, and local
ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from training.cluster.nodes import ClusterSpec


def test_cluster_spec_parsing(tmp_path: Path) -> None:
    doc = {"chief": ["h:1"], "ps": ["h:2"], "worker": ["h:3", "h:4"]}
    spec = ClusterSpec.parse(json.dumps(doc))
    assert spec.as_dict() == doc
    assert spec.tf_config("worker", 1) == {"cluster": doc, "task": {"type": "worker", "index": 1}}
    file = tmp_path / "tf_config.json"
    file.write_text(json.dumps({"cluster": doc, "task": {"type": "ps", "index": 0}}))
    assert ClusterSpec.parse(str(file)) == spec
    with pytest.raises(ValueError, match="unknown roles"):
        ClusterSpec.parse('{"evaluator": ["h:5"]}')
    local = ClusterSpec.local(host="127.0.0.1", chief=1, ps=2, workers=3)
    ports = [addr.rsplit(":", 1)[1] for _, _, addr in local.nodes()]
    assert len(ports) == len(set(ports)) == 6
