"""The tests' own layout: what test modules share lives in helper modules, not in each other."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_test_modules(source: str) -> set[str]:
    """The test modules (tests.test_*) a module's source imports, however the import is spelt."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            # A relative import inside tests/ is an import from the tests package.
            base = ".".join(filter(None, ["tests", node.module])) if node.level else node.module
            names = [base or ""] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= {".".join(name.split(".")[:2]) for name in names if name.startswith("tests.test_")}
    return found


class TestImports:
    def test_no_module_under_tests_imports_a_test_module(self) -> None:
        """No file in tests/ imports a test_*.py: a helper two test modules share has a module
        of its own (helpers, rig, shipped, prometheus, ...)."""
        paths = sorted(TESTS.glob("*.py"))
        assert TESTS / "conftest.py" in paths and Path(__file__).resolve() in paths
        importing = {
            path.name: sorted(imported)
            for path in paths
            if (imported := imported_test_modules(path.read_text()))
        }
        assert importing == {}

    def test_every_spelling_of_such_an_import_is_found(self) -> None:
        """import, from-import, `from tests import` and relative imports of a test module are
        found, in a function too; imports of helper modules and of sweeperd are not."""
        source = (
            "import tests.test_a\n"
            "from tests.test_b import helper\n"
            "from tests import test_c, helpers\n"
            "from .test_d import helper\n"
            "from . import test_e\n"
            "def late():\n"
            "    from tests.test_f import helper\n"
            "import tests.rig\n"
            "from tests.helpers import lease\n"
            "from sweeperd import settings\n"
            "from .server import RedisServer\n"
        )
        assert imported_test_modules(source) == {f"tests.test_{x}" for x in "abcdef"}
