"""The docs stand on their own (issue #17): README.md and docs/ point to no file outside the
repository, and every file of ours they name exists."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# A path into our own tree, as the docs name files: `service/api/app.py`, docs/design.md.
OURS = re.compile(r"(?<![\w./-])((?:domain|projections|service|tests|bench|docs|\.ci)/"
                  r"[\w./-]*\w)")


def test_no_page_points_outside_the_repository() -> None:
    outside = re.compile(r"\.\./|/work/|(?<![\w-])shared/")
    found = [(page.name, number, line.strip()) for page in PAGES
             for number, line in enumerate(page.read_text().splitlines(), start=1)
             if outside.search(line)]
    assert found == []


def test_every_file_of_ours_a_page_names_exists() -> None:
    missing = []
    for page in PAGES:
        for name in OURS.findall(page.read_text()):
            path = REPO / name.split(":")[0].split("#")[0]
            if not path.exists() and not any(ch in name for ch in "*{<"):
                missing.append((page.name, name))
    assert missing == []


def test_the_design_and_the_contract_are_in_the_repository() -> None:
    design = (REPO / "docs" / "design.md").read_text()
    assert "## Lessons we took from others" in design
    api = (REPO / "docs" / "api.md").read_text()
    for section in ("Contract: versions", "Contract: errors", "Contract: endpoints",
                    "Contract: DeleteVm and actions", "Contract: roles",
                    "Contract: headers we store"):
        assert f"## {section}" in api, section
    for page in PAGES:  # every link to a page of ours resolves
        for target in re.findall(r"\]\(([\w.-]+\.md)(?:#[\w-]+)?\)", page.read_text()):
            assert (page.parent / target).exists(), (page.name, target)


def test_operations_lists_every_read_models_tables(services) -> None:
    """Found by an operator tester: "What is in the database" left out four tables."""
    listed = (REPO / "docs" / "operations.md").read_text()
    start = listed.index("- the read models' position")
    section = listed[start:listed.index("- `idempotency_keys`", start)]
    missing = [(read_model.name, table)
               for read_model in services.projections.read_models.values()
               for table in (read_model.name, *read_model.tables)
               if f"`{table}`" not in section]
    assert missing == []
