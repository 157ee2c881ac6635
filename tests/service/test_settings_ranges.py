"""docs/operations.md's settings table states what each setting accepts as the settings model
does (service/settings.py, worded by service/settings_check.allowed): the page once said every
duration went up to a year, where several stop at 30 or 60 s (operator tester)."""

from __future__ import annotations

import re
from pathlib import Path

from service.settings import Settings
from service.settings_check import allowed, setting_names

PAGE = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
ROW = re.compile(r"^\| `(VMLEDGER_[A-Z0-9_]+)` \| (?P<default>[^|]*) \| (?P<allowed>[^|]*) \|")


def table() -> dict[str, str]:
    """The settings table's "allowed" cell of each variable."""
    return {found.group(1): found.group("allowed")
            for line in PAGE.read_text().splitlines() if (found := ROW.match(line))}


def test_every_setting_has_a_row_and_every_row_is_a_setting() -> None:
    assert sorted(table()) == sorted(setting_names())


def test_each_rows_allowed_cell_says_what_the_model_accepts() -> None:
    rows = table()
    wrong = {f"VMLEDGER_{name.upper()}": (rows.get(f"VMLEDGER_{name.upper()}"), allowed(name))
             for name in Settings.model_fields
             if rows.get(f"VMLEDGER_{name.upper()}") != allowed(name)}
    assert wrong == {}


def test_the_words_follow_the_bounds() -> None:
    assert allowed("postgres_connect_timeout_s") == "whole seconds, 2 to 60"
    assert allowed("postgres_pool_wait_s") == "seconds, more than 0, up to 30"
    assert allowed("job_lease_s") == "seconds, more than 0, up to 31,536,000"
    assert allowed("job_max_attempts") == "1 to 20"
    assert allowed("log_format") == "`json` or `text`"
