"""A read model whose table was dropped while its tracking row stayed, or whose table an older
version made without a column this one writes, is rebuilt from the log by the projection
runner when its loop starts, never served empty as if complete (found by an operator-tester:
after the restart the 503 advised, a job's row was gone for good and only ``audit verify``
noticed). A process that runs no projection runner (an auditor's command, a newer binary's
``history`` beside an older ``serve``) drops nothing (``ProjectionRunner.create_tables``,
``mend_stale_tables``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from service.container import Services
from service.schema_check import check_tables
from tests.builders import create
from tests.waiting import wait_until


def _damaged(settings, damage: Callable[[Services], None]) -> tuple[str, str, int]:
    """A VM and its provision job applied to every read model, then ``damage`` done to the
    tables; the VM's uuid, its job's and job_view's position before."""
    first = Services.build(settings)
    try:
        accepted = create(first)
        first.projections.catch_up()
        position = first.projections.position("job_view")
        damage(first)
    finally:
        first.close()
    return accepted.vm_uuid, accepted.job_uuid, position


def _drop_job_view(services: Services) -> None:
    with services.db.transaction() as tx:
        tx.execute("DROP TABLE job_view")


def _older_vm_view(services: Services) -> None:
    with services.db.transaction() as tx:  # vm_view as made before its tags_text column
        tx.execute("ALTER TABLE vm_view DROP COLUMN tags_text")


def _run_the_runner_until_rebuilt(services: Services, name: str, column: str) -> None:
    """Run the projection runner's loop until read model ``name``'s table has ``column`` and
    the read model has reached the log's head."""
    head = services.app.recorder.max_notification_id()

    def rebuilt() -> bool:
        with services.db.transaction(commit=False) as tx:
            made = column in services.db.columns(tx, name)
        return made and services.projections.position(name) >= head

    stop = threading.Event()
    loop = threading.Thread(target=services.projections.run_forever, args=(stop, 0.01))
    loop.start()
    try:
        wait_until(rebuilt, f"the runner to rebuild {name}")
    finally:
        stop.set()
        loop.join(10)


def test_the_runner_rebuilds_a_dropped_read_model_table_from_the_log(settings, caplog):
    vm_uuid, job_uuid, position = _damaged(settings, _drop_job_view)
    with caplog.at_level(logging.WARNING, logger="vmledger.projections.runner"):
        again = Services.build(settings)
    try:
        assert [r.getMessage() for r in caplog.records] == [
            ("read model job_view has applied events but its table job_view is missing or "
             "lacks a column (an older version's): the projection runner makes it again and "
             "rebuilds it from the log when it starts")]
        # not made again empty by a process that does not rebuild it
        assert again.projections.position("job_view") == position
        with again.db.transaction(commit=False) as tx:
            assert again.db.columns(tx, "job_view") == set()
        _run_the_runner_until_rebuilt(again, "job_view", "uuid")
        assert again.jobs.get(job_uuid)["vm_uuid"] == vm_uuid
    finally:
        again.close()


def test_an_older_versions_read_model_table_is_rebuilt_not_refused(settings):
    vm_uuid, _, _ = _damaged(settings, _older_vm_view)
    check_tables(settings)  # ours, of an older version: not another program's
    again = Services.build(settings)
    try:
        with again.db.transaction(commit=False) as tx:  # left as it was until the runner runs
            assert "tags_text" not in again.db.columns(tx, "vm_view")
        _run_the_runner_until_rebuilt(again, "vm_view", "tags_text")
        assert again.vms.get(vm_uuid)["uuid"] == vm_uuid
    finally:
        again.close()


def test_a_read_model_with_its_tables_is_left_as_it_is(settings):
    _, _, position = _damaged(settings, lambda services: None)
    again = Services.build(settings)
    try:
        again.projections.mend_stale_tables()
        assert again.projections.position("job_view") == position
    finally:
        again.close()
