"""The tests' own layout: what test modules share lives in tests/support, never in each other."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import REPO

TESTS = REPO / "tests"


def package_of(path: Path) -> str:
    """The dotted package a file under tests/ is in (tests.unit.fleet for its test_node.py)."""
    return ".".join(path.resolve().relative_to(REPO).parent.parts)


def containing_test_module(name: str) -> str | None:
    """The test module (a test_*.py) a dotted name is in or below, or None."""
    parts = name.split(".")
    if parts[0] != "tests":
        return None
    for n, part in enumerate(parts):
        if part.startswith("test_"):
            return ".".join(parts[: n + 1])
    return None


def imported_test_modules(source: str, package: str = "tests") -> set[str]:
    """The test modules a module's source imports (it being in `package`), however the import
    is spelt: import, from-import, from a package, relative, inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the package, `level - 1` packages up
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(filter(None, [*up, node.module or ""]))
            else:
                base = node.module or ""
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= {module for name in names if (module := containing_test_module(name)) is not None}
    return found


class TestImports:
    def test_no_module_under_tests_imports_a_test_module(self) -> None:
        """No file under tests/ imports a test_*.py: a helper two test modules share lives in
        tests/support (helpers, node_rig, shipped, prometheus_server, ...)."""
        paths = sorted(TESTS.rglob("*.py"))
        assert TESTS / "conftest.py" in paths and Path(__file__).resolve() in paths
        assert len([p for p in paths if p.name.startswith("test_")]) > 50
        importing = {
            str(path.relative_to(TESTS)): sorted(imported)
            for path in paths
            if (imported := imported_test_modules(path.read_text(), package_of(path)))
        }
        assert importing == {}

    def test_every_spelling_of_such_an_import_is_found(self) -> None:
        """import, from-import, `from tests.x import` and relative imports of a test module are
        found, in a function too; imports of the support modules and of sweeperd are not."""
        source = (
            "import tests.unit.test_a\n"
            "from tests.unit.fleet.test_b import helper\n"
            "from tests.scenarios import test_c, other\n"
            "from .test_d import helper\n"
            "from . import test_e\n"
            "from ..verb import test_g\n"
            "def late():\n"
            "    from tests.repo.test_f import helper\n"
            "import tests.support.node_rig\n"
            "from tests.support.helpers import lease\n"
            "from sweeperd.config import settings\n"
            "from .servers import RedisServer\n"
        )
        assert imported_test_modules(source, "tests.unit.fleet") == {
            "tests.unit.test_a",
            "tests.unit.fleet.test_b",
            "tests.scenarios.test_c",
            "tests.unit.fleet.test_d",
            "tests.unit.fleet.test_e",
            "tests.unit.verb.test_g",
            "tests.repo.test_f",
        }

    def test_every_test_folder_says_what_it_holds(self) -> None:
        """Each folder under tests/ has an __init__.py opening with a docstring, and the
        package's wings each have a folder of unit tests."""
        folders = sorted(p for p in TESTS.rglob("*") if p.is_dir() and p.name != "__pycache__")
        for folder in folders:
            init = folder / "__init__.py"
            assert init.exists(), folder
            assert ast.get_docstring(ast.parse(init.read_text())), init
        wings = {p.name for p in (REPO / "sweeperd").iterdir() if (p / "__init__.py").exists()}
        assert wings <= {p.name for p in (TESTS / "unit").iterdir() if p.is_dir()}
