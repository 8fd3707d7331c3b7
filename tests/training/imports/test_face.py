"""The face of ``training.imports``: its names come from their modules on first use, and the ``models``
commands, which import ``training.imports.cli``, load none of the import's code."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import training.imports as face


@pytest.mark.parametrize("name", face.__all__)
def test_each_name_of_the_face_is_its_modules_own(name: str) -> None:
    home = importlib.import_module(f"training.imports.{face._HOMES[name]}")
    assert getattr(face, name) is getattr(home, name)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        face.no_such_name  # noqa: B018


def test_the_import_command_loads_none_of_the_imports_code() -> None:
    probe = (
        "import sys\n"
        "import training.imports.cli\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'pyarrow', 'sqlalchemy')"
        " or m.startswith('training.imports.') and m != 'training.imports.cli'))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
