"""``vmledger replay TRACE``: drive the service with the Google 2011 ``task_events`` trace,
row by row through ``service.replay.replayer.Replayer``, then bring the read models up to
the log (``catch_up``). See ``docs/replay.md``.
"""

from __future__ import annotations

import time
from pathlib import Path

from rich.progress import Progress

from service.container import Services
from service.replay.commands import ReplayCommands
from service.replay.replayer import Replayer, Summary
from service.replay.trace import count_rows, read_rows

__all__ = ["Replayer", "Summary", "catch_up", "replay"]  # Replayer, Summary: for the tests


def replay(services: Services, trace: Path | str, *, skip_jobs: int = 0,
           max_jobs: int | None = None, max_rows: int | None = None,
           progress: Progress | None = None) -> Summary:
    """Replay ``trace`` into ``services``' database (it must have no VM yet) and return
    the summary; read models are not touched (see ``catch_up``). Raises ``OSError`` for an
    unreadable file (``EOFError`` for a truncated gzip) and ``ValueError`` for a database that
    already has VMs."""
    if services.app.recorder.select_notifications(0, 1, topics=["vm.created"]):
        raise ValueError("the database already has VMs; replay into an empty one")
    summary = Summary(trace=str(trace))
    replayer = Replayer(ReplayCommands(services.commands), summary)
    started = time.perf_counter()
    selection = {"skip_jobs": skip_jobs, "max_jobs": max_jobs, "max_rows": max_rows}
    task = None
    if progress is not None:
        task = progress.add_task("replaying", total=count_rows(trace, **selection))
    for line, fields in read_rows(trace, **selection):
        replayer.apply(line, fields)
        if task is not None and (summary.rows_read % 200 == 0):
            progress.update(task, completed=summary.rows_read, description=_said(summary))
    replayer.commit_all()
    if task is not None:  # the last rows' counts too, so the bar agrees with the summary
        progress.update(task, completed=summary.rows_read, total=summary.rows_read,
                        description=_said(summary))
    summary.final_states = replayer.final_states()
    summary.wall_time_s = time.perf_counter() - started
    return summary


def _said(summary: Summary) -> str:
    return f"replaying: {summary.vms_created} VMs, {sum(summary.refused.values())} refused"


def catch_up(services: Services, summary: Summary, progress: Progress | None = None) -> None:
    """Bring every read model up to the log's head, timing it into ``summary``."""
    started = time.perf_counter()
    runner = services.projections
    if progress is None:
        runner.catch_up()
    else:
        # Counted in positions gained, summed over the read models: the runner's callback
        # counts log events per batch, and one batch may serve several read models.
        head, before = runner.head(), runner.positions()
        task = progress.add_task("read models (positions, summed)",
                                 total=sum(head - p for p in before.values()))

        def gained(_n: int) -> None:
            now = runner.positions()
            progress.update(task, completed=sum(min(now[name], head) - p
                                                for name, p in before.items()))

        runner.catch_up(progress=gained)
        gained(0)
    summary.catch_up_s = time.perf_counter() - started
