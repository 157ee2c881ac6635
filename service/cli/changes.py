"""``vmledger changes``: tail the changefeed (docs/api.md, "Changes")."""

from __future__ import annotations

import signal
import threading
from typing import Annotated

import typer

from service.changes.filters import ChangeFilter
from service.changes.tail import line, tail
from service.container import Services
from service.settings import Settings


def changes_command(
    follow: Annotated[bool, typer.Option("--follow", "-f",
                                         help="keep printing changes as they are appended")
                      ] = False,
    after: Annotated[int | None, typer.Option(
        min=0, help="start after this log position (default: 0, or the head with --follow)")
                     ] = None,
    vm_uuid: Annotated[list[str] | None, typer.Option(help="only this VM (repeatable)")] = None,
    owner_uuid: Annotated[str | None, typer.Option(help="only VMs of this owner")] = None,
    server_uuid: Annotated[str | None, typer.Option(help="only changes on this server")] = None,
    type_: Annotated[list[str] | None, typer.Option(
        "--type", help="only events of this type, e.g. Stopped (repeatable)")] = None,
    state: Annotated[list[str] | None, typer.Option(
        help="only changes after which the resource is in this state (repeatable)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print each change's JSON")] = False,
) -> None:
    """Print one line per change of the log, in order; with --follow, until interrupted."""
    shown = ChangeFilter(
        vm_uuids=frozenset(vm_uuid) if vm_uuid else None, owner_uuid=owner_uuid,
        server_uuid=server_uuid, types=frozenset(type_) if type_ else None,
        states=frozenset(state) if state else None)
    services = Services.build(Settings())
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        tail(services, after if after is not None or follow else 0, shown, follow=follow,
             emit=lambda change: typer.echo(change.data if as_json else line(change)),
             stop=stop)
    finally:
        stop.set()
        services.close()
