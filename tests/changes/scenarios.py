"""Writers for changefeed tests: VMs of two owners, through the service's own commands."""

from __future__ import annotations

import uuid

from psycopg.sql import SQL, Identifier

from domain.vm import Vm, make_cause
from service.commands.application import VmSpec

OWNER_A = "930896af-bf8c-48d4-885c-6573a94b1853"
OWNER_B = "4f2a6a52-7c36-4a8e-9a4b-0c3d8d1e5f60"


def create_vm(services, owner: str, alias: str = "cf") -> str:
    """A new VM of ``owner`` (provisioning, its job queued); its uuid."""
    accepted = services.commands.create_vm(
        VmSpec(owner_uuid=owner, brand="joyent", ram=256, alias=alias),
        cause=make_cause("test"))
    return accepted.vm_uuid


def quarantine_and_release(services, vm_uuid: str) -> None:
    """Take ``vm_uuid`` into the operator quarantine, then give it back."""
    services.quarantine.quarantine(vm_uuid, "test", cause=make_cause("operator"))
    services.quarantine.release(vm_uuid, cause=make_cause("operator"))


def log_positions(services, after: int) -> list[int]:
    """Every position in the log after ``after``, in order."""
    found: list[int] = []
    while True:
        batch = services.app.recorder.select_notifications(after, 1000, inclusive_of_start=False)
        if not batch:
            return found
        found.extend(n.id for n in batch)
        after = batch[-1].id


def stored_created(services) -> tuple[str, object]:
    """A new VM's ``Created`` event as stored (not saved), and the VM's uuid: for a test that
    inserts it into the event table itself."""
    vm_uuid = uuid.uuid4()
    vm = Vm.create(vm_uuid=vm_uuid, owner_uuid=OWNER_A, brand="joyent", ram=256,
                   provision_job_uuid=str(uuid.uuid4()), cause=make_cause("test"))
    return str(vm_uuid), services.app.mapper.to_stored_event(vm.collect_events()[0])


def unlocked_append(connection, services, stored) -> None:
    """Insert the stored event ``stored`` over the psycopg ``connection`` (PostgreSQL), in its
    transaction, without the event store's table lock (no vmledger writer does that): the
    changefeed's reader must not need the lock."""
    recorder = services.app.recorder
    insert = SQL("INSERT INTO {}.{} (originator_id, originator_version, topic, state) "
                 "VALUES (%s, %s, %s, %s)").format(
        Identifier(recorder.datastore.schema), Identifier(recorder.events_table_name))
    connection.execute(insert, (stored.originator_id, stored.originator_version,
                                stored.topic, stored.state))
