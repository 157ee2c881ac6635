"""``vmledger changes``: tail the changefeed (docs/api.md, "Changes")."""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING, Annotated

import typer

from projections.formats import MAX_INTEGER
from service.changes.filters import ChangeFilter, checked_value, listed_values
from service.changes.records import Change
from service.changes.tail import line, tail
from service.cli.output import put
from service.cli.preflight import checked_services
from service.cli.stop_signals import (
    CommandStopped,
    restore_signals,
    stop_on_signals,
    uninterrupted,
    work_done,
)

if TYPE_CHECKING:
    from service.container import Services


def changes_command(
    follow: Annotated[bool, typer.Option("--follow", "-f",
                                         help="keep printing changes as they are appended")
                      ] = False,
    # GET /changes's range: past it a position is not one, and the database's INTEGER overflows
    after: Annotated[int | None, typer.Option(
        min=0, max=MAX_INTEGER,
        help="start after this log position (default: 0, or the head with --follow)")] = None,
    vm_uuid: Annotated[list[str] | None, typer.Option(
        help="only this VM (repeatable, or comma-separated)")] = None,
    owner_uuid: Annotated[str | None, typer.Option(help="only VMs of this owner")] = None,
    server_uuid: Annotated[str | None, typer.Option(help="only changes on this server")] = None,
    type_: Annotated[list[str] | None, typer.Option(
        "--type", help="only events of this type, e.g. Stopped (repeatable, or comma-separated)")] = None,
    state: Annotated[list[str] | None, typer.Option(
        help="only changes after which the resource is in this state (repeatable, or "
             "comma-separated)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print each change's JSON")] = False,
) -> None:
    """Print one line per change of the log, in order; with --follow, until interrupted.
    A filter value ``GET /changes`` would refuse is refused naming its option."""
    shown = ChangeFilter(
        vm_uuids=_checked_all("vm_uuid", vm_uuid),
        owner_uuid=_checked("owner_uuid", owner_uuid) if owner_uuid else None,
        server_uuid=_checked("server_uuid", server_uuid) if server_uuid else None,
        types=_checked_all("type", type_), states=_checked_all("state", state))
    services = checked_services(register_fleet=False, writes=False)
    start = after if after is not None or follow else 0
    if follow:
        _follow(services, start, shown, as_json)
    else:
        _dump(services, start, shown, as_json)


def _follow(services: Services, after: int | None, shown: ChangeFilter, as_json: bool) -> None:
    """``changes --follow``: until SIGINT or SIGTERM, which end it, status 0, once the line
    it is printing is out (the signal only sets the tail's ``stop``)."""
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        tail(services, after, shown, follow=True,
             emit=lambda change: put(change.data if as_json else line(change)),
             stop=stop, warn=lambda said: typer.echo(said, err=True))
    finally:
        stop.set()
        services.close()


def _dump(services: Services, after: int, shown: ChangeFilter, as_json: bool) -> None:
    """``changes`` without ``--follow``: the changes after ``after`` up to the head. A stop
    signal ends it as any command that ends is stopped (``stop_signals``): one line naming
    the last position printed, to go on from with ``--after``, and status 128 + the signal
    (it exited 0, a dump cut short looking whole; operator tester)."""
    printed = [after]  # the position printed last (or the start)
    end = services.commands.head_position()

    @uninterrupted  # a stop waits for the line and its position noted (stop_signals)
    def emit(change: Change) -> None:
        put(change.data if as_json else line(change))
        printed[0] = change.position
        if change.position >= end:  # the last: a stop waiting now came after the work
            work_done("vmledger changes")

    handlers = stop_on_signals()
    try:
        try:
            tail(services, after, shown, follow=False, emit=emit, stop=threading.Event(),
                 warn=lambda said: typer.echo(said, err=True), end=end)
        finally:
            work_done("vmledger changes")  # a signal from here on leaves the result standing
    except CommandStopped as stopped:
        where = (f"after position {printed[0]}, the last it printed" if printed[0] != after
                 else f"before printing a change after position {after}")
        typer.echo(f"vmledger changes: stopped by {stopped} {where}; go on with --after "
                   f"{printed[0]}", err=True)
        raise typer.Exit(128 + stopped.signum) from None
    finally:
        services.close()
        restore_signals(handlers)


def _checked(name: str, value: str) -> str:
    """``value`` as the filter compares it; ``typer.BadParameter`` naming the option if
    ``GET /changes`` would refuse it (``checked_value``)."""
    canonical, problem = checked_value(name, value)
    if problem:
        named = problem if repr(value[:64]) in problem else f"{problem}: {value[:64]!r}"
        raise typer.BadParameter(named, param_hint=f"--{name.replace('_', '-')}")
    return canonical


def _checked_all(name: str, values: list[str] | None) -> frozenset[str] | None:
    """Every value of a repeatable option, each also comma-separated as ``GET /changes``
    takes it (``--type Stopped,Destroyed``), checked (``_checked``); None when not given."""
    if not values:
        return None
    listed = []
    for value in values:
        parts, malformed = listed_values(value)  # GET /changes' rule: no empty element
        if malformed:
            raise typer.BadParameter(malformed, param_hint=f"--{name.replace('_', '-')}")
        listed += parts
    return frozenset(_checked(name, value) for value in listed)
