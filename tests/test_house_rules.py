"""House rules of the test suite itself: a test module never imports another test module (shared builders live
in helper modules such as ``tests/<area>/<name>data.py``), checked on the source with ``ast``; and
docs/architecture.md's folder walk names every module of the packages, so the map stays true."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
# the packages docs/architecture.md walks folder by folder
WALKED = ("core", "registry", "predictions", "access", "monitors", "training", "alerts", "service")


def _module(path: Path, root: Path) -> str:
    return ".".join(path.relative_to(root.parent).with_suffix("").parts)


def _is_test_module(name: str) -> bool:
    return name.rsplit(".", 1)[-1].startswith("test_")


def _imported_modules(tree: ast.Module, importer: str) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in ``tree``, at any depth, relative ones resolved; a
    ``from package import name`` also yields ``package.name`` (``name`` may be a module)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = importer.split(".")[: -node.level]
                base = ".".join(package + ([base] if base else []))
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def _offences(root: Path = TESTS) -> list[str]:
    """Every "importer:line imports module" where a test module imports another test module under ``root``."""
    offences = []
    for path in sorted(root.rglob("*.py")):
        importer = _module(path, root)
        for line, name in _imported_modules(ast.parse(path.read_text(), str(path)), importer):
            if _is_test_module(name) and name.split(".")[0] == root.name and name != importer:
                offences.append(f"{path.relative_to(root.parent)}:{line} imports {name}")
    return offences


def test_no_test_module_imports_another_test_module() -> None:
    offences = _offences()
    assert not offences, "move the shared builder into a helper module:\n" + "\n".join(offences)


def test_the_check_finds_each_kind_of_import(tmp_path: Path) -> None:
    package = tmp_path / "tests"
    (package / "area").mkdir(parents=True)
    for name in ("__init__.py", "area/__init__.py", "area/test_source.py", "area/helpers.py"):
        (package / name).write_text("X = 1\n")
    (package / "area" / "test_absolute.py").write_text("from tests.area.test_source import X\n")
    (package / "area" / "test_relative.py").write_text("from .test_source import X\n")
    (package / "area" / "test_module.py").write_text("import tests.area.test_source\n")
    (package / "area" / "test_package.py").write_text("from tests.area import test_source\n")
    (package / "area" / "test_nested.py").write_text(
        "def test_x():\n    from tests.area.test_source import X\n"
    )
    (package / "area" / "test_fine.py").write_text("from tests.area.helpers import X\nimport json\n")
    offences = _offences(package)
    assert offences == [
        "tests/area/test_absolute.py:1 imports tests.area.test_source",
        "tests/area/test_module.py:1 imports tests.area.test_source",
        "tests/area/test_nested.py:2 imports tests.area.test_source",
        "tests/area/test_package.py:1 imports tests.area.test_source",
        "tests/area/test_relative.py:1 imports tests.area.test_source",
    ]


def _unwalked(root: Path, doc: str, packages: tuple[str, ...] = WALKED) -> list[str]:
    """Every module (``pkg/x.py``) and sub-package (``pkg/sub/``) under ``packages`` that ``doc`` does not
    name in backticks."""
    missing = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root)
            name = f"{relative.parent.as_posix()}/" if path.name == "__init__.py" else relative.as_posix()
            if f"`{name}`" not in doc:
                missing.append(name)
    return missing


def test_the_architecture_doc_walks_every_module() -> None:
    missing = _unwalked(ROOT, (ROOT / "docs" / "architecture.md").read_text())
    assert not missing, "add a line for each to docs/architecture.md's folder walk:\n" + "\n".join(missing)


def test_the_walk_check_finds_each_missing_module_and_package(tmp_path: Path) -> None:
    for name in (
        "core/__init__.py",
        "core/named.py",
        "core/unnamed.py",
        "core/sub/__init__.py",
        "core/sub/deep.py",
    ):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    doc = "- `core/`: the floor\n- `core/named.py`: named\n- `core/sub/deep.py`: deep, but not its package\n"
    assert _unwalked(tmp_path, doc, ("core",)) == ["core/sub/", "core/unnamed.py"]
    assert _unwalked(tmp_path, doc + "`core/sub/` `core/unnamed.py`", ("core",)) == []
