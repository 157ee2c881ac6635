"""The stuck check says what it did (docs/operations.md, "Logs"; docs/jobs.md): one WARNING
per VM it quarantines, naming the VM (in the line's scope), the state it was stuck in and
the reason. Operator tester: a VM stuck in provisioning was quarantined, and its provision
canceled, without a line in the log."""

from __future__ import annotations

from tests.integration.test_quarantine import create, later


def test_the_stuck_check_logs_one_warning_per_vm_it_quarantines(services, json_logs):
    fine = create(services)
    services.fleet.faults.pause_workers(True)  # their provisions never run: stuck
    stuck = [create(services, run=False) for _ in range(2)]
    services.projections.catch_up()
    later(services, services.quarantine.stuck.thresholds.transient_s + 1)
    services.worker.periodic()
    services.worker.periodic()  # nothing more to quarantine: nothing more said
    lines = [line for line in json_logs() if line["logger"].endswith("quarantine")]
    assert sorted(line["vm_uuid"] for line in lines) == sorted(stuck)
    for line in lines:
        reason = services.commands.load(line["vm_uuid"]).quarantine["reason"]
        assert reason.startswith("stuck in provisioning since")
        assert line["level"] == "WARNING"
        assert line["message"] == (
            f"the stuck check quarantined the VM (it was provisioning): {reason}")
        assert (line["vm_state"], line["reason"]) == ("provisioning", reason)
    assert services.commands.load(fine).state == "running"
