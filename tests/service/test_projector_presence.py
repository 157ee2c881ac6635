"""Whether a projection runner runs on a database (service/projector_presence.py): each
runner holds a shared lock while it runs, which ``/ping``, a read's 503 and ``serve``'s start
ask about (docs/operations.md, "Is a projection runner running?")."""

from __future__ import annotations

from pathlib import Path

from service.append_wakeups import own_connection_params
from service.projector_presence import ProjectorPresence, projector_running
from service.storage import PostgresLedgerRecorder
from tests.cli import stop_processes, vmledger_process
from tests.waiting import wait_until


def _presence(services) -> ProjectorPresence:
    recorder = services.app.recorder
    return ProjectorPresence(services.settings, own_connection_params(recorder)
                             if isinstance(recorder, PostgresLedgerRecorder) else None)


def test_a_runner_holds_the_lock_while_it_runs_and_several_may_hold_it(services) -> None:
    def running() -> bool:
        return projector_running(services.settings, services.db)

    assert not running()
    first, second = _presence(services), _presence(services)
    first.start()
    second.start()
    wait_until(running, "the runners' lock to be held")
    first.stop()
    assert running()  # the other runner still holds it
    second.stop()
    wait_until(lambda: not running(), "the lock to be given back")


def test_vmledger_project_holds_the_lock_until_it_stops(services, tmp_path: Path) -> None:
    def running() -> bool:
        return projector_running(services.settings, services.db)

    log = tmp_path / "project.log"
    process = vmledger_process("project", log_path=log,
                               database_url=services.settings.database_url)
    try:
        wait_until(running, "vmledger project to hold the runners' lock", log_path=log)
    finally:
        stop_processes([process])
    assert process.returncode == 0
    wait_until(lambda: not running(), "the lock to end with the process")


def test_the_embedded_runner_holds_it_from_start_to_stop(services) -> None:
    services.start_background(projections=True, worker=False)
    assert services.projector_running()
    wait_until(lambda: projector_running(services.settings, services.db),
               "the embedded runner's lock, seen as another process sees it")
    services.stop_background()
    assert not services.projector_running()
