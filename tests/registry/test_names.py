"""Model names: one pattern, checked by the registry's path builder; property-based with hypothesis."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from core.errors import DomainError, Invalid
from registry.names import (
    MAX_VERSION,
    NAME_PATTERN,
    InvalidName,
    InvalidVersion,
    check_label,
    check_name,
    parse_ref,
    parse_version,
)
from registry.service import OutsideRegistry, model_dir, version_dir

CORE = re.compile(NAME_PATTERN.removeprefix("^").removesuffix("$"))

# names an attacker or a typo would try: traversal, absolute paths, separators, route syntax, control chars
TRICKY = [
    "",
    ".",
    "..",
    "../evil",
    "..\\evil",
    "/etc/passwd",
    "/abs/path",
    "a/b",
    "a\\b",
    "a b:predict",
    "credit:predict",
    "-rf",
    ".hidden",
    "a\nb",
    "abc\n",
    "a\x00b",
    "ünïcode",
    "١٢٣",  # non-ASCII digits
    "x" * 65,
    "~",
    "a%2Fb",
    "C:\\x",
]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("registry-root")


def _assert_rejected(name: str, root: Path) -> None:
    with pytest.raises(InvalidName) as info:
        check_name(name)
    message = str(info.value)
    assert "\n" not in message and "\r" not in message, message  # one line
    assert message.startswith("model name ") and "is not allowed (" in message
    assert NAME_PATTERN in message and "e.g. 'credit-risk'" in message  # the rule and how to fix it
    assert isinstance(info.value, Invalid) and info.value.status_code == 400 and info.value.exit_code == 2
    with pytest.raises(InvalidName):
        version_dir(registry=root, model_name=name, version=1)


def _assert_inside(name: str, root: Path, version: int) -> None:
    path = version_dir(registry=root, model_name=name, version=version)
    resolved_root = root.resolve()
    assert path.is_absolute() and path == path.resolve()
    assert path.is_relative_to(resolved_root)
    assert path.parent.parent == resolved_root and path.parent.name == name and path.name == str(version)
    assert model_dir(registry=root, model_name=name) == path.parent


@settings(max_examples=400, deadline=None)
@given(name=st.text(max_size=80))
@example(name="credit")
def test_arbitrary_text_is_either_a_safe_name_or_one_clear_line(root: Path, name: str) -> None:
    accepted = CORE.fullmatch(name) is not None
    if accepted:
        assert check_name(name) == name
        _assert_inside(name, root, 1)
    else:
        _assert_rejected(name, root)


@settings(max_examples=300, deadline=None)
@given(name=st.from_regex(CORE, fullmatch=True), version=st.integers(1, MAX_VERSION))
def test_every_name_of_the_pattern_builds_a_path_inside_the_registry(
    root: Path, name: str, version: int
) -> None:
    assert check_name(name) == name and check_label(name) == name
    _assert_inside(name, root, version)


@pytest.mark.parametrize("name", TRICKY)
def test_tricky_names_are_rejected(root: Path, name: str) -> None:
    _assert_rejected(name, root)


def test_messages_say_what_is_wrong() -> None:
    cases = {
        "": "it is empty",
        "x" * 65: "it has 65 characters, more than 64",
        ".x": "it starts with '.'",
        "-x": "it starts with '-'",
        "a b": "it contains ' '",
        "a/b": "it contains '/'",
        "a:b": "it contains ':'",
    }
    for name, rule in cases.items():
        with pytest.raises(InvalidName, match=re.escape(rule)):
            check_name(name)
    with pytest.raises(InvalidName, match=r"^--model: model name '\.\./evil'"):
        check_name("../evil", given_as="--model")
    with pytest.raises(InvalidName, match="^label 'a b' is not allowed"):
        check_label("a b")
    long = "y" * 5000
    with pytest.raises(InvalidName) as info:
        check_name(long)
    assert "(5000 characters)" in str(info.value) and len(str(info.value)) < 400  # quoted, not pasted whole


def test_boundaries_of_the_pattern() -> None:
    for good in ("a", "_", "0", "A.b-c_d", "credit-risk.v2", "x" * 64, "a..b", "a-"):
        assert check_name(good) == good


def test_versions() -> None:
    assert parse_version("1") == 1 and parse_version(str(MAX_VERSION)) == MAX_VERSION
    for bad in ("0", "-1", "x", "1.5", "", " 1", "²", str(MAX_VERSION + 1), "9" * 5000):
        with pytest.raises(InvalidVersion, match="must be a positive integer from 1 to"):
            parse_version(bad)
    assert parse_ref("credit") == ("credit", None)
    assert parse_ref("credit:12") == ("credit", 12)
    with pytest.raises(InvalidVersion, match="the version in 'credit:x'"):
        parse_ref("credit:x")
    with pytest.raises(InvalidName):
        parse_ref("a b:predict")
    with pytest.raises(InvalidVersion):
        version_dir(registry=Path("/tmp"), model_name="credit", version=0)
    with pytest.raises(InvalidVersion):
        version_dir(registry=Path("/tmp"), model_name="credit", version=True)


def test_a_symbolic_link_out_of_the_registry_is_refused(tmp_path: Path) -> None:
    root, elsewhere = tmp_path / "models", tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    os.symlink(elsewhere, root / "credit")
    with pytest.raises(OutsideRegistry, match="outside the registry") as info:
        version_dir(registry=root, model_name="credit", version=1)
    assert isinstance(info.value, DomainError) and "\n" not in str(info.value)
    (root / "other").mkdir()
    os.symlink(elsewhere, root / "other" / "2")
    with pytest.raises(OutsideRegistry):
        version_dir(registry=root, model_name="other", version=2)
    # a registry root that is itself a link is fine: paths are compared after resolving it
    link = tmp_path / "link"
    os.symlink(root, link)
    assert version_dir(registry=link, model_name="fine", version=3) == root.resolve() / "fine" / "3"
