"""``vmledger project`` serves its process's metrics, the projection lag among them, at
``VMLEDGER_METRICS_ADDRESS`` as ``vmledger work`` does (found by an operator-tester: in
production mode no process published the lag the documented alert watches)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx


def test_project_serves_the_projection_lag_at_the_metrics_address(tmp_path: Path) -> None:
    env = {**os.environ, "VMLEDGER_DATABASE_URL": f"sqlite:///{tmp_path / 'vmledger.db'}",
           "VMLEDGER_METRICS_ADDRESS": "127.0.0.1:0", "VMLEDGER_LOG_FORMAT": "text",
           "VMLEDGER_SIM_SERVERS": "1"}
    process = subprocess.Popen([sys.executable, "-m", "service", "project"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert process.stdout is not None
        port = None
        for line in process.stdout:  # until it says where it serves them
            found = re.search(r"metrics on port (\d+)", line)
            if found:
                port = int(found.group(1))
                break
        assert port, "vmledger project never said where it serves its metrics"
        wanted = [f'vmledger_projection_lag_events{{read_model="{name}"}}'
                  for name in ("vm_view", "job_view")]
        deadline = time.monotonic() + 30  # the lag is reported after the first pass
        while True:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
            if all(sample in text for sample in wanted) or time.monotonic() > deadline:
                break
        assert all(sample in text for sample in wanted), text
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
    assert process.returncode == 0
