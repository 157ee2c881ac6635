"""``vmledger changes``: tail the changefeed (docs/api.md, "Changes")."""

from __future__ import annotations

import signal
import threading
from typing import Annotated

import typer

from projections.formats import MAX_INTEGER
from service.changes.filters import ChangeFilter, checked_value, listed_values
from service.changes.tail import line, tail
from service.cli.output import put
from service.cli.preflight import checked_services


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
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        tail(services, after if after is not None or follow else 0, shown, follow=follow,
             emit=lambda change: put(change.data if as_json else line(change)),
             stop=stop, warn=lambda said: typer.echo(said, err=True))
    finally:
        stop.set()
        services.close()


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
