"""``vmledger project`` serves its process's metrics, the projection lag among them, at
``VMLEDGER_METRICS_ADDRESS`` as ``vmledger work`` does (found by an operator-tester: in
production mode no process published the lag the documented alert watches)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from tests.cli import stop_processes, vmledger_process
from tests.waiting import wait_until


def test_project_serves_the_projection_lag_at_the_metrics_address(tmp_path: Path) -> None:
    log = tmp_path / "project.log"
    process = vmledger_process(
        "project", log_path=log, database_url=f"sqlite:///{tmp_path / 'vmledger.db'}",
        env={"VMLEDGER_METRICS_ADDRESS": "127.0.0.1:0", "VMLEDGER_LOG_FORMAT": "text"})
    try:
        port = wait_until(lambda: re.search(r"metrics on port (\d+)", log.read_text()),
                          "vmledger project to say where it serves its metrics",
                          log_path=log).group(1)
        wanted = [f'vmledger_projection_lag_events{{read_model="{name}"}}'
                  for name in ("vm_view", "job_view")]

        def lag_served() -> bool:  # after the runner's first pass
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
            return all(sample in text for sample in wanted)

        wait_until(lag_served, "the projection lag at /metrics", log_path=log)
    finally:
        stop_processes([process])
    assert process.returncode == 0
