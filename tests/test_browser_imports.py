"""The default suite (``pip install -e '.[test]'``, no Playwright) collects every test module:
a browser test module imports Playwright inside its tests or fixtures, never at its top. CI's
default step once stopped at collection ("No module named 'playwright'") on a new browser test
that did."""

from __future__ import annotations

import ast
from pathlib import Path

BROWSER_TESTS = Path(__file__).parent / "browser"


def _top_level_imports(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of each import statement at the top level of ``path``."""
    found = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, node.module))
    return found


def test_no_browser_test_module_imports_playwright_at_its_top() -> None:
    modules = sorted(BROWSER_TESTS.glob("*.py"))
    assert modules, "no browser test modules found"
    at_top = [f"{path.name}:{line}" for path in modules
              for line, module in _top_level_imports(path)
              if module.split(".")[0] == "playwright"]
    assert at_top == []
