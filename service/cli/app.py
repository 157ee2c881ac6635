"""The ``vmledger`` command line: a thin layer over the same objects the HTTP API uses.

``serve``, ``project``, ``work``, ``rebuild``; ``replay``, ``history``, ``audit verify``,
``changes`` and ``token create`` in modules of their own (api.md, "Running and
configuration").
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Annotated

import typer

from domain.errors import DamagedStreamError
from projections.parallel_rebuild import RebuildFailed
from projections.tracking import ProjectionConflictError
from service.cli.audit import audit_verify_command, history_command
from service.cli.changes import changes_command
from service.cli.endings import database_ending
from service.cli.preflight import check_database, checked_services
from service.cli.progress import finish, progress_bar
from service.cli.replay import replay_command
from service.cli.stop_signals import (
    CommandStopped,
    restore_signals,
    stop_on_signals,
    work_done,
)
from service.cli.tokens import token_create
from service.container import READ_MODEL_NAMES, Services
from service.database_failures import database_failure
from service.logs import Throttled, database_shown, setup_command_logging, setup_logging
from service.metrics import serve_process_metrics
from service.rebuild_lock import RebuildRunningError, one_rebuild_at_a_time
from service.settings import MAX_PORT, Settings

# uvicorn's exit status for a server that could not start (its address taken)
STARTUP_FAILURE = 3

cli = typer.Typer(help="vmledger: an event-sourced VM lifecycle service.", no_args_is_help=True)


def _services(settings: Settings | None = None, *, register_fleet: bool = True,
              writes: bool = True) -> Services:
    # one line, not a traceback, for a missing database; settings already read are not read
    # again (their checks look at the file system)
    return checked_services(settings, register_fleet=register_fleet, writes=writes)


def _count(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1 ("1 difference", "6 read models")."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _print_version(asked: bool) -> None:
    if asked:
        from importlib.metadata import version

        typer.echo(f"vmledger {version('vmledger')}")
        raise typer.Exit()


@cli.callback()
def _options(
    version: Annotated[bool, typer.Option(
        "--version", help="Print vmledger's version and exit.", is_eager=True,
        callback=_print_version)] = False,
) -> None:
    """vmledger: an event-sourced VM lifecycle service."""


def _wait_for_signal() -> threading.Event:
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    return stop


@cli.command()
def serve(
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(
        min=0, max=MAX_PORT, help="port to listen on (0: a free one, logged)")] = 8080,
    workers: Annotated[int, typer.Option(help="HTTP worker processes", min=1)] = 1,
) -> None:
    """Serve the HTTP API; on SQLite also run the projection runner and the job worker."""
    from service.api.app import refuse_open_bind_without_tokens
    from service.api.connection import KEEP_ALIVE_S
    from service.api.http_protocol import NoDelayHttpToolsProtocol

    settings = Settings()
    refuse_open_bind_without_tokens(settings, host)
    check_database(settings)
    options = {"log_config": setup_logging(settings), "log_level": settings.log_level.lower(),
               "access_log": False, "timeout_keep_alive": KEEP_ALIVE_S,
               "http": NoDelayHttpToolsProtocol, "ws": "websockets-sansio",
               # X-Forwarded-* is any client's to send: behind a proxy, VMLEDGER_PUBLIC_URL
               "proxy_headers": False}
    if workers > 1:  # processes of our own: uvicorn's share one socket and balance badly
        from service.api.processes import serve_processes

        try:
            status = serve_processes(workers, host, port, options)
        except ValueError as error:
            raise typer.BadParameter(str(error)) from None
        except OSError as error:  # the address taken: as uvicorn ends one process (exit 3)
            logging.getLogger("uvicorn.error").error(
                "[Errno %s] error while attempting to bind on address %r: %s", error.errno,
                (host, port), (error.strerror or str(error)).lower())
            raise typer.Exit(STARTUP_FAILURE) from None
        raise typer.Exit(status)
    from service.api import serving
    from service.api.processes import APP

    serving.run(APP, factory=True, host=host, port=port, **options)


@cli.command()
def project() -> None:
    """Run the projection runner until interrupted (production mode)."""
    from projections.collector import LongLivedFrozen, collect_young_less_often
    from service.append_wakeups import wake_on_appends

    settings = Settings()
    setup_logging(settings)
    _serve_process_metrics(settings)  # the projection lag
    collect_young_less_often()  # the whole process is the runner's
    services = _services(settings, register_fleet=False)
    stop = _wait_for_signal()
    wake_on_appends(services.app.recorder, services.projections.wake, stop)
    services.hold_projector_lock()  # /ping and the reads know a runner runs (until close)
    log = logging.getLogger("vmledger.project")
    log.info("projection runner started: database %s, read models %s",
             database_shown(settings), ", ".join(services.projections.read_models))
    try:
        services.projections.run_forever(
            stop, settings.projection_poll_s,
            on_error=Throttled(log, "projection runner (retrying)"),
            frozen=LongLivedFrozen())  # the whole process is the runner's
    finally:
        services.close()
        log.info("projection runner stopped")


def _serve_process_metrics(settings: Settings) -> None:
    """Serve the process's metrics at ``VMLEDGER_METRICS_ADDRESS`` (if set) for ``project``
    and ``work``, which serve no API; an address that cannot be bound ends the command with
    one line naming the variable (status 2)."""
    try:
        serve_process_metrics(settings.metrics_address)
    except OSError as error:
        # as main() names a bad setting: not click's usage box (5 lines, "Usage: vmledger
        # work [OPTIONS]" for a setting no option gives; operator tester)
        typer.echo(f"VMLEDGER_METRICS_ADDRESS: cannot listen on {settings.metrics_address}: "
                   f"{error.strerror or error}", err=True)
        raise typer.Exit(2) from None


@cli.command()
def work() -> None:
    """Run a job worker until interrupted (production mode; several may run at once). The
    first SIGINT or SIGTERM stops it taking jobs and lets the job in hand finish; a second
    leaves that job to its lease (docs/operations.md, "Stopping processes")."""
    from service.jobs.worker import stop_on_signals

    settings = Settings()
    setup_logging(settings)
    _serve_process_metrics(settings)  # the worker's metrics, retries
    services = _services(settings)
    stop = stop_on_signals(services.worker)
    # as vmledger project says it started: a worker with no job to take logs nothing else
    logging.getLogger("vmledger.work").info(
        "worker %s started: database %s", services.worker.worker_id, database_shown(settings))
    try:
        services.worker.run_forever(stop, services.settings.worker_poll_s)
    finally:
        services.close()


@cli.command()
def rebuild(
    names: Annotated[list[str] | None, typer.Argument(
        help=f"read models: {', '.join(READ_MODEL_NAMES)} (default: all)")] = None,
    processes: Annotated[int | None, typer.Option(
        min=1, max=8, help="processes to build them in, each reading the log itself "
        "(default: VMLEDGER_REBUILD_PROCESSES)")] = None,
) -> None:
    """Rebuild read models from position 1 while the service keeps serving them: built
    together beside their live tables in batches (one read of the log per process), then
    each switched in one transaction once all are built."""
    # a name listed twice means it once (docs/operations.md), in the order first given
    chosen = list(dict.fromkeys(names or READ_MODEL_NAMES))
    unknown = set(chosen) - set(READ_MODEL_NAMES)
    if unknown:
        raise typer.BadParameter(f"unknown read models: {', '.join(sorted(unknown))} (valid: "
                                 f"{', '.join(READ_MODEL_NAMES)})", param_hint="NAMES")
    services = _services(register_fleet=False)
    if processes is not None:
        services.projections.rebuild_processes = processes
    handlers = stop_on_signals()
    try:
        try:
            with one_rebuild_at_a_time(services.settings), progress_bar() as bar:
                task = bar.add_task(f"rebuilding {', '.join(chosen)}",
                                    total=services.commands.head_position())
                count = services.projections.rebuild(
                    chosen, progress=lambda n: bar.advance(task, n))
                events = finish(bar, task, f"rebuilt {', '.join(chosen)}, switched")
        finally:
            work_done("vmledger rebuild")  # a signal from here on leaves the result standing
        # events appended during the build are applied at the switch, not read by the build:
        # N may pass K x E (an analyst read that as events applied twice)
        typer.echo(f"rebuilt {', '.join(chosen)}: {count} events applied in all "
                   f"({_count(len(chosen), 'read model')}), {events} events in the log read "
                   "by the build; what was appended meanwhile applied at the switch")
    except CommandStopped as stopped:
        # the process's own build and its children are stopped on the way here (the
        # ``finally`` of projections.parallel_rebuild), before its lock goes with it
        typer.echo(f"vmledger rebuild: stopped by {stopped}: a read model not yet switched "
                   "is as it was (the next rebuild clears what this one left)", err=True)
        raise typer.Exit(128 + stopped.signum) from None
    except RebuildRunningError as error:
        typer.echo(f"vmledger rebuild: {error}: run one at a time; the live read models are "
                   "as they were", err=True)
        raise typer.Exit(1) from None
    except ProjectionConflictError as error:  # a rebuild that took no lock (an older vmledger)
        typer.echo(f"vmledger rebuild: {error}: is another rebuild running? Run one at a "
                   "time; the live read models are as they were", err=True)
        raise typer.Exit(1) from None
    except DamagedStreamError as error:  # the log edited behind our back
        typer.echo(f"vmledger rebuild: {error}: the log needs repair (vmledger audit verify "
                   "names every such event); the live read models are as they were", err=True)
        raise typer.Exit(1) from None
    except RebuildFailed as error:  # a child process's failure, its traceback as text
        if database_failure(error) is not None:
            raise  # the database lost in a child: main's one line, as in this process
        said = str(error).splitlines()
        cause = f": {said[-1]}" if len(said) > 1 else ""
        typer.echo(f"vmledger rebuild: {said[0].rstrip(':')}{cause}; nothing was switched "
                   "(the live read models are as they were)", err=True)
        raise typer.Exit(1) from None
    finally:
        services.close()
        restore_signals(handlers)


token = typer.Typer(help="Bearer tokens (docs/operations.md, \"Tokens and roles\").",
                    no_args_is_help=True)
cli.add_typer(token, name="token")


# Commands defined in modules of their own are registered here, explicitly: importing a module
# never registers anything by itself.
cli.command("replay")(replay_command)
cli.command("changes")(changes_command)
cli.command("history")(history_command)
audit = typer.Typer(help="Auditors' checks.", no_args_is_help=True)
cli.add_typer(audit, name="audit")
audit.command("verify")(audit_verify_command)
token.command("create")(token_create)


def main() -> None:
    """Entry point of the ``vmledger`` console script. Bad settings end any command with one
    line per problem naming the variable, and status 2, never with a traceback (which would
    also print the values given, a database password included); so do a ``.env`` that is
    not UTF-8 text, naming it, and a privilege the database role lacks, naming the role. A database that could not be reached or was lost
    (``service.database_failures``) ends any command that ends on it with one line naming
    the database and the error, and status 1; ``serve``, ``work`` and ``project`` retry
    through an outage instead (docs/operations.md). Warns of each ``VMLEDGER_*`` variable
    that is no setting (``settings_check.warn_of_unknown_variables``). Logs warnings and
    errors (of an outage's reconnects, only errors), one line each, unless the command sets
    up its own logging (``setup_command_logging``)."""
    from pydantic import ValidationError

    from service.cli.help import unwrapped
    from service.schema_check import PrivilegeError
    from service.settings import EnvFileError
    from service.settings_check import warn_of_unknown_variables

    setup_command_logging()  # serve, work and project set up their own
    warn_of_unknown_variables()  # a typo of a setting's name was ignored without a word
    try:
        unwrapped(typer.main.get_command(cli))(prog_name="vmledger")
    except EnvFileError as error:
        typer.echo(str(error), err=True)
        raise SystemExit(2) from None
    except PrivilegeError as refused:  # a table missing that the role may not create
        typer.echo(f"vmledger: {refused}", err=True)
        raise SystemExit(2) from None
    except ValidationError as error:
        for problem in error.errors(include_input=False, include_url=False):
            name = "_".join(str(part) for part in problem["loc"]).upper()
            # our validators' own words, without pydantic's prefix (operator tester)
            said = str(problem["msg"]).removeprefix("Value error, ")
            typer.echo(f"VMLEDGER_{name}: {said}" if name else f"vmledger: {said}", err=True)
        raise SystemExit(2) from None
    except CommandStopped as stopped:  # between a command's work and its own stop handling
        typer.echo(f"vmledger: stopped by {stopped}", err=True)
        raise SystemExit(128 + stopped.signum) from None
    except Exception as error:
        ending = database_ending(error)
        if ending is None:
            raise
        line, status = ending
        typer.echo(line, err=True)
        raise SystemExit(status) from None

