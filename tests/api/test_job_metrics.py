"""Job metrics at ``GET /metrics`` (docs/operations.md, "Health and metrics"): jobs by
execution state and the deepest VM queue, read from ``job_view`` at scrape time, and the
worker's count of lease takeovers."""

from __future__ import annotations

import logging

import httpx
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from domain.states import Execution
from domain.vm import Vm
from service import metrics
from service.metrics import JobCollector, serve_process_metrics
from service.jobs.worker import Worker, utcnow
from tests.api.conftest import PausedWorker
from tests.api.helpers import V2, act, create_vm
from tests.builders import cause

EXECUTIONS = [e.value for e in Execution]


def scrape(paused: PausedWorker) -> dict[tuple[str, tuple], float]:
    """Every sample of ``GET /metrics`` once ``job_view`` has caught up with the log:
    ``{(name, sorted label items): value}``."""
    services = paused.services
    assert services.projections.wait_for(
        services.commands.head_position(), ("job_view",), timeout=10)
    response = paused.http.get("/metrics")
    assert response.status_code == 200
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(response.text)
            for sample in family.samples}


def job_figures(paused: PausedWorker) -> tuple[dict[str, float], float]:
    """``vmledger_jobs`` by execution, and ``vmledger_vm_queue_depth_max``, from /metrics."""
    samples = scrape(paused)
    by_execution = {e: samples[("vmledger_jobs", (("execution", e),))] for e in EXECUTIONS}
    return by_execution, samples[("vmledger_vm_queue_depth_max", ())]


def zero(**counts: int) -> dict[str, int]:
    return {e: counts.get(e, 0) for e in EXECUTIONS}


def test_jobs_by_state_and_the_deepest_vm_queue_follow_the_jobs(paused: PausedWorker) -> None:
    http = paused.http
    assert job_figures(paused) == (zero(), 0)
    # A: its provision and a start queued behind it (version 2 queues it).
    a = create_vm(http)["vm_uuid"]
    assert act(http, a, "start", headers=V2).status_code == 202
    # B: a provision that will fail.
    create_vm(http, internal_metadata={"force_provision_failure": True})
    # C: deleted while provisioning (v2): its provision is canceled, a destroy is queued.
    c = create_vm(http)["vm_uuid"]
    assert http.delete(f"/vms/{c}", headers=V2).status_code == 202

    assert job_figures(paused) == (zero(queued=4, canceled=1), 2)

    assert paused.run_jobs() == 4
    assert job_figures(paused) == (zero(succeeded=3, failed=1, canceled=1), 0)


def test_a_job_taken_over_after_its_lease_expired_is_counted(paused: PausedWorker) -> None:
    services = paused.services
    created = create_vm(paused.http)
    vm_uuid, job_uuid = created["vm_uuid"], created["job_uuid"]
    # A worker claims the provision and is lost: its lease runs for the usual length.
    now = utcnow()
    services.commands.change(Vm, vm_uuid, lambda vm: vm.start_job(
        job_uuid, worker="lost-worker", now=now, lease_expires_at=now + services.worker.lease,
        cause=cause("worker:lost-worker")))
    assert job_figures(paused) == (zero(running=1), 1)
    takeovers = "vmledger_job_lease_takeovers_total"
    before = metrics.LEASE_TAKEOVERS._value.get()

    # While the lease holds no worker takes the job, and nothing is counted; the worker's
    # metrics are served once a worker of this process ran
    assert not services.worker.run_vm(vm_uuid)
    assert REGISTRY.get_sample_value(takeovers) == before
    assert scrape(paused)[(takeovers, ())] == before
    # Once it has expired (a worker whose clock is past it), one takes it over.
    rescuer = Worker(
        services.commands, services.fleet, find_work=services.jobs.vms_with_unfinished_jobs,
        placement=services.worker.placement, worker_id="rescuer",
        clock=lambda: utcnow() + services.worker.lease * 2)
    assert rescuer.run_vm(vm_uuid)
    assert scrape(paused)[(takeovers, ())] == before + 1
    # The lost worker had created nothing, so the takeover carries the provision on
    # (docs/jobs.md, row P1); what matters here is that it ran again, at attempt 2.
    assert job_figures(paused) == (zero(succeeded=1), 0)
    taken_over = services.jobs.get(job_uuid)
    assert taken_over["attempt"] == 2
    assert taken_over["chain_results"][0]["name"] == "reconcile"


def test_job_metrics_are_left_out_not_failed_when_the_database_cannot_be_read() -> None:
    def unreachable():
        raise ConnectionError("database down")

    registry = CollectorRegistry(auto_describe=True)
    registry.register(JobCollector(unreachable))  # describing reads nothing
    text = generate_latest(registry).decode()
    assert "vmledger_jobs{" not in text and "vmledger_vm_queue_depth_max " not in text


def test_a_worker_process_serves_its_own_metrics_at_the_configured_address(caplog) -> None:
    with caplog.at_level(logging.INFO, logger="vmledger.service.metrics"):
        server = serve_process_metrics("127.0.0.1:0")
    assert server is not None
    try:
        # the line names the host and port it listens on (it said "on port 8311")
        [line] = [r for r in caplog.records if "metrics" in r.getMessage()]
        address = f"127.0.0.1:{server.server_port}"
        assert line.getMessage() == f"serving this process's metrics on {address} at /metrics"
        assert line.metrics_address == address
        response = httpx.get(f"http://127.0.0.1:{server.server_port}/metrics", timeout=5)
        assert response.status_code == 200
        assert "vmledger_version_conflict_retries_total" in response.text
    finally:
        server.shutdown()
        server.server_close()
    assert serve_process_metrics(None) is None
