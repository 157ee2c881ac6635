"""The stuck check is the operator's safety net for a job whose node hangs (docs/jobs.md,
docs/simulation.md): found by a tester, it never ran in the embedded default, whose one worker
ran it between jobs only, and that worker was the one inside the hung job (renewing its
lease), so the VM was never quarantined."""

from __future__ import annotations

import threading

from domain.states import Action
from domain.vm import make_cause
from service.commands.versioning import NEWEST
from tests.integration.test_quarantine import create, later
from tests.waiting import wait_until


def test_the_stuck_check_runs_while_the_only_worker_is_inside_a_hung_job(services,
                                                                      monkeypatch):
    vm_uuid = create(services)
    worker = services.worker
    inside, go_on = threading.Event(), threading.Event()
    ensure_state = worker.driver.ensure_state

    def hangs(*args, **kwargs):
        if vm_uuid in args:
            inside.set()
            assert go_on.wait(60)
        return ensure_state(*args, **kwargs)

    monkeypatch.setattr(worker.driver, "ensure_state", hangs)
    services.commands.request_action(vm_uuid, Action.REBOOT, behaviour=NEWEST,
                                     cause=make_cause())
    services.projections.catch_up()  # the worker finds its work in job_view
    worker.periodic_s = 0.05
    stop = threading.Event()
    running = threading.Thread(target=worker.run_forever, args=(stop, 0.05), daemon=True)
    running.start()
    try:
        assert inside.wait(30), "the reboot never reached the node"
        services.projections.catch_up()  # the check reads the running job from job_view
        later(services, services.quarantine.stuck.thresholds.job_s + 1)
        wait_until(lambda: services.commands.load(vm_uuid).state == "quarantined",
                   "the stuck check to quarantine the VM while its job hangs", timeout=30)
        assert inside.is_set() and not go_on.is_set()  # the worker was in the job all along
        assert "running since" in services.commands.load(vm_uuid).quarantine["reason"]
    finally:
        go_on.set()
        stop.set()
        running.join(30)
    assert not running.is_alive()
