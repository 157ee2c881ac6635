"""``vmledger replay TRACE``: the command line of the trace replay (``service.replay.run``)."""

from __future__ import annotations

import gzip
import json
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from service.cli.preflight import checked_services
from service.cli.progress import progress_bar
from service.cli.stop_signals import (
    CommandStopped,
    restore_signals,
    stop_on_signals,
    work_done,
)
from service.database_failures import database_failure

if TYPE_CHECKING:
    from service.container import Services
    from service.replay.replayer import Summary


# The summary's counts and their labels: VMs named as in the rows of their states below
# ("VMs running"), where the key's spelling gave "vms created" (a tester)
_COUNTS = {"rows_read": "rows read", "rows_applied": "rows applied",
           "rows_refused": "rows refused", "rows_ignored": "rows ignored",
           "vms_created": "VMs created"}


def _print(summary: Summary, console: Console) -> None:
    table = Table(title=f"replay of {Path(summary.trace).name}", show_header=False)
    data = summary.as_dict()
    for key, label in _COUNTS.items():
        table.add_row(label, f"{data[key]:,}")
    for group, prefix in (("final_states", "VMs "), ("refused", "refused: "),
                          ("ignored", "ignored: ")):
        for name, count in data[group].items():
            table.add_row(f"  {prefix}{name}", f"{count:,}")
    table.add_row("wall time (replay)", f"{summary.wall_time_s:.1f} s")
    table.add_row("read models caught up in", f"{summary.catch_up_s:.1f} s after it")
    table.add_row("  positions behind when it ended", f"{summary.behind_at_end:,} "
                  "(summed over the read models)")
    if summary.applied_beside:
        table.add_row("  events applied during the replay", f"{summary.applied_beside:,}")
    console.print(table)


def replay_command(
    trace: Annotated[Path, typer.Argument(help="task_events CSV (.csv.gz or .csv)")],
    max_jobs: Annotated[int | None, typer.Option(
        min=0, help="replay only the first N distinct job_ids, in file order (whole tasks)")
    ] = None,
    skip_jobs: Annotated[int, typer.Option(
        min=0, help="skip the first K distinct job_ids (--max-jobs counts after them)")] = 0,
    max_rows: Annotated[int | None, typer.Option(min=0, help="stop after N rows")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as JSON")] = False,
    follow: Annotated[bool, typer.Option(
        help="catch the read models up in a second process while the replay runs")] = True,
) -> None:
    """Replay a Google 2011 task_events trace through the service (docs/replay.md)."""
    problem = trace_problem(trace)
    if problem:
        raise typer.BadParameter(problem, param_hint="TRACE")
    from service.replay.run import catch_up, replay, replay_and_catch_up

    services = checked_services()
    progress = progress_bar()
    handlers = stop_on_signals()
    stage = _Stage()
    try:
        try:
            stage.head_at_start = services.commands.head_position()  # the fleet's, if any
            selection = {"skip_jobs": skip_jobs, "max_jobs": max_jobs, "max_rows": max_rows,
                         "on_replayed": stage.replayed}
            with progress:
                if follow:
                    summary = replay_and_catch_up(services, trace, progress=progress,
                                                  **selection)
                else:
                    summary = replay(services, trace, progress=progress, **selection)
                    catch_up(services, summary, progress)
        finally:
            work_done("vmledger replay")  # a signal from here on leaves the result standing
    except CommandStopped as stopped:
        # its children stopped and what it handed to the committer written, on the way here
        # (service.replay.run), before the database is closed
        typer.echo(f"vmledger replay: {_stopped(stopped, services, stage)}", err=True)
        raise typer.Exit(128 + stopped.signum) from None
    except UnicodeDecodeError as error:  # a ValueError, but the trace's, not the database's
        raise typer.BadParameter(f"cannot read the trace: it is not UTF-8 text ({error})",
                                 param_hint="TRACE") from None
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None
    except (OSError, EOFError) as error:
        # not gzip (BadGzipFile), or truncated (EOFError, which click would print as a bare
        # "Aborted."); the progress bar's count reads the file first, so nothing was replayed.
        # Any other OSError (the follower's process, the database's file) is not the trace's.
        if not _the_traces(error, trace):
            raise
        raise typer.BadParameter(f"cannot read the trace: {error}", param_hint="TRACE") from None
    except Exception as error:
        failure = database_failure(error)
        if failure is None:
            raise  # the replay's own bug: its traceback is what a developer needs
        raise SystemExit(
            f"vmledger replay: the database failed during the replay ({failure}); a replay "
            "cannot be resumed (it needs an empty database, and what it appended stays): "
            "drop and create the database, or point VMLEDGER_DATABASE_URL at a new one, "
            "then run the same command again") from None
    finally:
        services.close()
        restore_signals(handlers)
    if as_json:
        typer.echo(json.dumps(summary.as_dict(), indent=2))
    else:
        _print(summary, Console())


class _Stage:
    """How far a replay got, for what its stop says: the log's head before it appended
    anything (None until read), and whether every row was replayed and committed."""

    def __init__(self) -> None:
        self.head_at_start: int | None = None
        self.all_replayed = False

    def replayed(self, _summary: Summary) -> None:
        self.all_replayed = True


def _stopped(stopped: CommandStopped, services: Services, stage: _Stage) -> str:
    """What a replay stopped by a signal says it left (docs/replay.md, "Stopping a replay"),
    by how far it got:

    - every row replayed (the read models' catch-up was running): the log holds the whole
      replay, only the read models are behind, and there is nothing to replay again (the
      same command would be refused: the database has VMs);
    - nothing appended yet (the log holds only what the service writes at its start, the
      simulated fleet): the same command can be run again on this database;
    - otherwise the log's events, whole appends in the order the replay made them, so a
      consistent prefix of its log (``audit verify`` passes), and that it cannot be
      continued (a tester: the first case said so too, of a complete replay)."""
    try:
        head: int | None = services.commands.head_position()
    except Exception:  # noqa: BLE001 - the database lost as well: say the rest anyway
        head = None
    if stage.all_replayed:
        held = "the whole replay" if head is None else f"the whole replay, {head:,} events"
        return (f"stopped by {stopped} after every row of the trace was replayed, while the "
                f"read models caught up: the log holds {held} (vmledger audit verify "
                "passes). Only the read models are behind: vmledger project or vmledger "
                "rebuild brings them up; there is nothing to replay again")
    if head is not None and head == stage.head_at_start:
        held = ("nothing" if not head else f"only the {head:,} events the service writes "
                "at its start (the simulated fleet's servers)")
        return (f"stopped by {stopped} before anything of the trace was replayed: the log "
                f"holds {held}. Run the same command again on this database to replay the "
                "trace")
    held = ("the log holds what it appended before" if head is None
            else f"the log holds its first {head:,} events")
    return (f"stopped by {stopped}: {held}, whole appends in order (vmledger audit verify "
            "passes; the read models may be behind: vmledger project or rebuild brings them "
            "up). A replay cannot be resumed: to replay the trace, drop and create the "
            "database (or point VMLEDGER_DATABASE_URL at a new one) and run the same command "
            "again")


def trace_problem(trace: Path) -> str | None:
    """What makes ``trace`` no trace file, in a user's words, or None: nothing there (or a
    symbolic link to nothing, or a path through a file), a directory, or not a regular file
    (a pipe or a device: the trace is read twice, once to count its rows for the progress
    bar). Whether its content reads is found out when it is read."""
    try:
        mode = trace.stat().st_mode
    except FileNotFoundError:
        if trace.is_symlink():
            return f"{trace} is a symbolic link to a file that does not exist"
        return f"no such file: {trace}"
    except NotADirectoryError:
        return f"no such file: {trace} (a part of its path is a file, which is not a directory)"
    except OSError as error:  # no permission to search a directory, a loop of links, ...
        return f"cannot read {trace}: {error.strerror or error}"
    if stat.S_ISDIR(mode):
        return f"{trace} is a directory; the trace is a file in it (.csv.gz or .csv)"
    if not stat.S_ISREG(mode):
        return (f"{trace} is not a regular file: the trace is read twice (its rows are "
                "counted first), so it must be a file (.csv.gz or .csv)")
    return None


def _the_traces(error: BaseException, trace: Path) -> bool:
    """Whether ``error`` came from reading the trace file ``trace``."""
    return (isinstance(error, (EOFError, gzip.BadGzipFile))
            or getattr(error, "filename", None) in (str(trace), trace))
