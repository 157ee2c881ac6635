"""The auditor's commands: ``vmledger history VM`` (every event of a VM as JSON lines) and
``vmledger audit verify`` (hash chains, snapshots and read models against the log). Both only
read: they build the services without the simulated fleet and without writing
(``checked_services(writes=False)``), so a SELECT-only role runs them (docs/operations.md,
"Database privileges")."""

from __future__ import annotations

import json
from uuid import UUID

import typer

from domain.errors import DamagedStreamError, VmNotFoundError
from domain.json_input import cut
from service.cli.output import put
from service.cli.preflight import checked_services
from service.cli.progress import finish, progress_bar
from service.cli.stop_signals import (
    CommandStopped,
    restore_signals,
    stop_on_signals,
    uninterrupted,
    work_done,
)


def history_command(vm_uuid: str) -> None:
    """Print every event of a VM as JSON lines. An argument that is no uuid is a usage
    error (status 2), as ``changes --vm-uuid bad`` is; a uuid no VM has is "not found",
    status 1."""
    from service.audit.history import vm_history

    _require_uuid(vm_uuid, "VM_UUID")
    services = checked_services(register_fleet=False, writes=False)
    printed: list[int] = []  # the version printed last

    @uninterrupted  # a stop waits for the line and its version noted (stop_signals)
    def show(entry: dict, last: bool) -> None:
        put(json.dumps(entry))
        printed[:] = [entry["version"]]
        if last:  # a stop waiting now came after the work
            work_done("vmledger history")

    handlers = stop_on_signals()
    try:
        try:
            entries = vm_history(services.commands, vm_uuid, after_version=0, limit=1_000_000)
            for at, entry in enumerate(entries, 1):
                show(entry, at == len(entries))
        finally:
            work_done("vmledger history")  # a signal from here on leaves the result standing
    except CommandStopped as stopped:
        where = (f"after version {printed[0]} (the last printed)" if printed
                 else "before any event was printed")
        typer.echo(f"vmledger history: stopped by {stopped} {where}", err=True)
        raise typer.Exit(128 + stopped.signum) from None
    except VmNotFoundError as error:
        typer.echo(f"vmledger history: {error}", err=True)
        raise typer.Exit(1) from None
    except DamagedStreamError as error:  # the log was edited
        typer.echo(f"vmledger history: {error}: the log needs repair (vmledger audit verify "
                   "names what is wrong)", err=True)
        raise typer.Exit(1) from None
    finally:
        services.close()
        restore_signals(handlers)


def _require_uuid(value: str, name: str) -> None:
    """Raise ``typer.BadParameter`` naming the argument ``name`` unless ``value`` is a uuid
    (any case, hyphens or not, as ``uuid.UUID`` reads it and ``GET /vms/{uuid}`` takes it)."""
    try:
        UUID(value)
    except ValueError:
        raise typer.BadParameter(f"not a uuid: {cut(repr(value))}", param_hint=name) from None


def audit_verify_command() -> None:
    """Replay every stream and check its hash chain, check every stored snapshot against a
    fresh fold of its stream, and compare every read model with a fresh fold of the whole
    log. Exit status 0 when all held, 1 when anything differed (docs/operations.md says what
    it cannot find)."""
    from service.audit.read_models import verify_read_models
    from service.audit.snapshots import verify_snapshots
    from service.audit.verify import verify_chains

    services = checked_services(register_fleet=False, writes=False)
    notes: list[str] = []
    handlers = stop_on_signals()
    try:
        try:
            with progress_bar() as bar:
                task = bar.add_task("checking hash chains",
                                    total=services.commands.head_position())
                differences = verify_chains(services.app, lambda n: bar.advance(task, n))
                events = finish(bar, task)
                differences += verify_snapshots(services.app)
                task = bar.add_task("comparing read models with a fresh fold",
                                    total=events * len(services.projections.read_models))
                differences += verify_read_models(services, lambda n: bar.advance(task, n),
                                                  notes)
                finish(bar, task)
        finally:
            work_done("vmledger audit verify")  # a signal from here on leaves the result
    except CommandStopped as stopped:
        typer.echo(f"vmledger audit verify: stopped by {stopped} before its checks ended: "
                   "nothing is reported (it only reads: run it again)", err=True)
        raise typer.Exit(128 + stopped.signum) from None
    finally:
        services.close()
        restore_signals(handlers)
    for note in notes:
        put(f"note: {note}")
    for difference in differences:
        put(str(difference))
    if differences:
        found = len(differences)
        put(f"audit verify: {found} difference{'' if found == 1 else 's'}")
        raise typer.Exit(1)
    put(f"audit verify: every stream's chain, every snapshot and every read model held "
        f"({events} events)")
