"""The command line's handling of bad settings (service/cli/app.py, ``main``)."""

from __future__ import annotations

import os
import subprocess
import sys


def test_bad_settings_end_any_command_with_one_line_naming_the_variable_and_no_values(
    tmp_path,
) -> None:
    env = {**os.environ, "VMLEDGER_DATABASE_URL": "mysql://admin:hunter2@db/vm"}
    done = subprocess.run([sys.executable, "-m", "service", "project"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "VMLEDGER_DATABASE_URL: Value error, must start with sqlite:/// or postgresql://"]
    assert "hunter2" not in done.stdout + done.stderr
