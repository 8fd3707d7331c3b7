"""The alert rules file (YAML): ``models: {<model name or "*">: [rule, ...]}``.

Every problem is one :class:`core.errors.Invalid` naming the file, the path in the document
(``models.credit[1].for``) and the rule; nothing is stored from a file with a problem. ``*`` holds the
rules of every model without rules of its own.

    models:
      credit:
        - name: drift
          kind: dataset_drift
          severity: warning
          for: 2                 # consecutive monitor runs before it fires
          actions: [notify, retrain]
      "*":
        - {name: perf, kind: performance, params: {metric: roc_auc, margin: 0.05}, severity: critical}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from alerts.specs import RuleSpec, parse_rules
from core.errors import Invalid
from registry.names import check_name

WILDCARD = "*"


def parse_document(doc: Any, *, where: str) -> dict[str, list[RuleSpec]]:
    """The rules of each model named in a parsed document; Invalid naming ``where`` and the path."""
    if not isinstance(doc, dict) or set(doc) - {"models"} or not isinstance(doc.get("models"), dict):
        found = sorted(map(str, doc)) if isinstance(doc, dict) else type(doc).__name__
        raise Invalid(
            f"{where}: the document must be a mapping with one key 'models' (a mapping of model name or '*' "
            f"to a list of rules), found {found}"
        )
    out: dict[str, list[RuleSpec]] = {}
    for name, rules in doc["models"].items():
        path = f"models.{name}"
        if name != WILDCARD:
            try:
                check_name(name if isinstance(name, str) else str(name))
            except Invalid as exc:
                raise Invalid(f"{where}: {path}: {exc}") from None
        try:
            out[str(name)] = parse_rules(rules, path=path)
        except Invalid as exc:
            raise Invalid(f"{where}: {exc}") from None
    return out


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, but a mapping with a key written twice is an error (the plain loader keeps the
    last one silently: a model's rules written twice lost the first list)."""


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in seen
        except TypeError:  # an unhashable key: the mapping constructor names it
            continue
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"the key {key!r} is written twice", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def parse_text(text: str, *, where: str) -> dict[str, list[RuleSpec]]:
    """The rules of a YAML text; malformed YAML (a key twice too) is Invalid naming the line and column."""
    try:
        doc = yaml.load(text, Loader=_UniqueKeyLoader)  # nosec B506: a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise Invalid(f"{where}: not valid YAML{at}: {problem}") from None
    return parse_document(doc, where=where)


def load_rules_file(path: Path) -> dict[str, list[RuleSpec]]:
    """The rules of each model in the YAML file at ``path``."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise Invalid(f"{path}: cannot read the alert rules file ({type(exc).__name__}: {exc})") from None
    return parse_text(text, where=str(path))
