"""A command that only reads (``audit verify``, ``history``, ``changes``) on a SQLite file that
does not exist: a mistyped path made an empty database and the audit said every stream held
(auditor tester). It is refused in one line, and no file is left behind."""

from __future__ import annotations

import pytest

from tests.cli import vmledger


@pytest.mark.parametrize("args", [
    ("audit", "verify"),
    ("history", "930896af-bf8c-48d4-885c-6573a94b1853"),
    ("changes",),
])
def test_a_read_only_command_refuses_a_sqlite_file_that_does_not_exist(tmp_path, args):
    typo = tmp_path / "typo.db"
    ended = vmledger(*args, database_url=f"sqlite:///{typo}")
    assert ended.returncode == 2, ended.stdout + ended.stderr
    assert not typo.exists()
    [line] = ended.stderr.strip().splitlines()
    assert line.startswith("VMLEDGER_DATABASE_URL: ") and str(typo) in line
    assert "does not exist" in line
    assert "held" not in ended.stdout
