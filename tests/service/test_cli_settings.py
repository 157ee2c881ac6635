"""The command line's handling of bad settings (service/cli/app.py, ``main``)."""

from __future__ import annotations

import pytest

from tests.cli import vmledger


def test_bad_settings_end_any_command_with_one_line_naming_the_variable_and_no_values(
    tmp_path,
) -> None:
    done = vmledger("project", database_url="mysql://admin:hunter2@db/vm", cwd=tmp_path,
                    timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "VMLEDGER_DATABASE_URL: Value error, must start with sqlite:/// or postgresql://"]
    assert "hunter2" not in done.stdout + done.stderr


@pytest.mark.parametrize("name, value, message", [
    # found by a tester: both passed "greater than 0", then overflowed a timedelta or a wait
    ("VMLEDGER_JOB_LEASE_S", "inf", "must be a number of seconds up to 31,536,000 (a year)"),
    ("VMLEDGER_JOB_LEASE_S", "1e15", "must be a number of seconds up to 31,536,000 (a year)"),
    ("VMLEDGER_POSTGRES_LOCK_TIMEOUT_S", "99999999999",
     "must be a number of seconds up to 31,536,000 (a year)"),
    ("VMLEDGER_CHANGES_HEARTBEAT_S", "-inf", "greater than 0"),
    # found by a tester: SQLite's 75-line "unable to open database file"
    ("VMLEDGER_DATABASE_URL", "sqlite:////nonexistent/dir/x.db",
     "names a file in /nonexistent/dir, which is not a directory that exists"),
])
def test_a_setting_past_what_it_can_mean_ends_the_command_in_one_line(
        tmp_path, name: str, value: str, message: str) -> None:
    done = vmledger("audit", "verify", env={name: value}, cwd=tmp_path, timeout=60)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"{name}: ") and message in line
