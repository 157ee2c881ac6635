"""Imports point one way: ``service -> projections -> domain`` (design.md, "Layout").

The layers contract lives in pyproject.toml (``[tool.importlinter]``); the first test runs
``lint-imports`` so a broken contract fails the suite. import-linter sees an outside package
only as a whole (``eventsourcing``), so the finer rule for ``domain/`` (the standard library
and ``eventsourcing.domain`` only) is checked by reading its sources with ``ast``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_import_linter_layers_contract_is_kept() -> None:
    lint_imports = Path(sys.executable).parent / "lint-imports"
    assert lint_imports.exists(), "import-linter is missing: pip install -e '.[test]'"
    result = subprocess.run(
        [str(lint_imports), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def _imported_modules(path: Path) -> list[str]:
    """Absolute module names imported by the file (relative imports stay inside the package)."""
    modules = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            modules.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.append(node.module)
    return modules


def _allowed_in_domain(module: str) -> bool:
    top = module.split(".")[0]
    return (
        top in sys.stdlib_module_names
        or top == "domain"
        or module == "eventsourcing.domain"
        or module.startswith("eventsourcing.domain.")
    )


def test_domain_imports_only_the_standard_library_and_eventsourcing_domain() -> None:
    sources = sorted((ROOT / "domain").rglob("*.py"))
    assert sources, "domain/ has no Python sources"
    offending = [
        f"{path.relative_to(ROOT)}: {module}"
        for path in sources
        for module in _imported_modules(path)
        if not _allowed_in_domain(module)
    ]
    assert not offending, (
        "domain/ may import only the standard library and eventsourcing.domain: "
        + ", ".join(offending)
    )
