"""What the processes that serve no API serve at ``VMLEDGER_METRICS_ADDRESS``, and what
``serve`` in production mode serves at ``/metrics``. ``vmledger project`` serves the
projection lag, as ``vmledger work`` serves its own (an operator-tester found that in
production mode no process published the lag the documented alert watches). The job
worker's metrics (``vmledger_job_lease_takeovers_total``, ``vmledger_worker_damaged_streams``,
``vmledger_worker_failing_vms``) are exported only by a process that runs a worker, as the
projection lag only by one that runs a projection runner
(``service.metrics.export_worker_metrics``; operator tester: ``serve`` in production mode
and ``vmledger project`` exported them as a constant 0, which hid a worker whose own
endpoint was not scraped). Real processes: the test process's registry is every test's."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from tests.cli import stop_processes, vmledger_process
from tests.integration.processes import free_port
from tests.waiting import wait_until

WORKER_METRICS = ("vmledger_job_lease_takeovers_total", "vmledger_worker_damaged_streams",
                  "vmledger_worker_failing_vms")


def _exported(text: str) -> set[str]:
    return {name for name in WORKER_METRICS if re.search(rf"^{name} ", text, re.MULTILINE)}


def _served_by(command: str, tmp_path: Path, ready: str) -> str:
    """The text ``vmledger COMMAND`` serves at its ``VMLEDGER_METRICS_ADDRESS``, once it has
    ``ready`` (a metric its loop publishes after its first pass)."""
    log = tmp_path / f"{command}.log"
    process = vmledger_process(
        command, log_path=log, database_url=f"sqlite:///{tmp_path / 'vmledger.db'}",
        env={"VMLEDGER_METRICS_ADDRESS": "127.0.0.1:0", "VMLEDGER_LOG_FORMAT": "text",
             "VMLEDGER_SIM_SERVERS": "1"})
    try:
        port = wait_until(lambda: re.search(r"metrics on [^ ]*:(\d+) at /metrics", log.read_text()),
                          f"vmledger {command} to say where it serves its metrics",
                          log_path=log).group(1)

        def text() -> str | None:
            served = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
            return served if ready in served else None

        return wait_until(text, f"{ready} at vmledger {command}'s /metrics", log_path=log)
    finally:
        stop_processes([process])


def test_project_serves_the_projection_lag_and_no_worker_metric(tmp_path: Path) -> None:
    served = _served_by("project", tmp_path, 'vmledger_projection_lag_events{read_model="vm_view"}')
    assert 'vmledger_projection_lag_events{read_model="job_view"}' in served
    assert _exported(served) == set()


def test_work_exports_the_worker_metrics(tmp_path: Path) -> None:
    assert _exported(_served_by("work", tmp_path, "vmledger_worker_failing_vms ")) == \
        set(WORKER_METRICS)


def test_serve_in_production_mode_exports_no_worker_metric(tmp_path: Path) -> None:
    log, port = tmp_path / "serve.log", free_port()
    process = vmledger_process(
        "serve", "--port", str(port), log_path=log,
        database_url=f"sqlite:///{tmp_path / 'vmledger.db'}",
        env={"VMLEDGER_EMBEDDED_RUNNERS": "false", "VMLEDGER_SIM_SERVERS": "1"})
    try:
        def scraped() -> str | None:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
            except httpx.HTTPError:
                return None
            return response.text if response.status_code == 200 else None

        served = wait_until(scraped, "serve's /metrics", log_path=log)
    finally:
        stop_processes([process])
    assert "vmledger_version_conflict_retries_total" in served  # its own metrics are there
    assert _exported(served) == set()
