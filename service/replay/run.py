"""``vmledger replay TRACE``: drive the service with the Google 2011 ``task_events`` trace,
row by row through ``service.replay.replayer.Replayer``, then bring the read models up to
the log (``catch_up``); ``replay_and_catch_up`` does both, the read models followed beside
the replay by a process of their own (``service.replay.follow``). See ``docs/replay.md``.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from pathlib import Path

from rich.progress import Progress

from domain.vm import FIRST_TOPICS
from service.container import Services
from service.replay.ahead import RowsAhead
from service.replay.commands import ReplayCommands
from service.replay.follow import Follower
from service.replay.replayer import Replayer, Summary
from service.replay.trace import count_rows

# How often the replay moves every object alive into the garbage collector's permanent
# generation (``gc.freeze``), in rows. The cache of 250,000 aggregates (service.replay.
# commands) is millions of long-lived objects that the cyclic collector's full collections
# walked again and again: 161 s of 410 such collections over the whole shard, with 68 s in
# the younger ones (docs/performance.md, "The follower held SQLite's write lock; the
# replay's garbage collector"). Frozen objects are still freed when their last reference
# goes; only a cycle among them is never collected, and the replay makes few (a refusal's
# traceback).
FREEZE_EVERY_ROWS = 20_000

# Replayer and Summary: for the tests.
__all__ = ["Replayer", "Summary", "catch_up", "replay", "replay_and_catch_up"]


def replay(services: Services, trace: Path | str, *, skip_jobs: int = 0,
           max_jobs: int | None = None, max_rows: int | None = None,
           progress: Progress | None = None,
           on_replayed: Callable[[Summary], None] | None = None) -> Summary:
    """Replay ``trace`` into ``services``' database (it must have no VM yet) and return
    the summary; read models are not touched (see ``catch_up``). ``on_replayed`` is called
    with the summary once every selected row is replayed and its appends committed (what a
    stop after it leaves is the whole replay: docs/replay.md, "Stopping a replay"). Raises
    ``OSError`` for an unreadable file (``EOFError`` for a truncated gzip) and
    ``ValueError`` for a database that already has VMs."""
    _refuse_a_database_with_vms(services)
    summary = Summary(trace=str(trace))
    replayer = Replayer(ReplayCommands(services.commands), summary)
    started = time.perf_counter()
    selection = {"skip_jobs": skip_jobs, "max_jobs": max_jobs, "max_rows": max_rows}
    rows = RowsAhead(trace, **selection)  # reading from now on, on the other core
    try:
        task = None
        if progress is not None:
            task = progress.add_task("replaying", total=count_rows(trace, **selection))
        for line, fields in rows:
            replayer.apply(line, fields)
            if summary.rows_read % FREEZE_EVERY_ROWS == 0:
                gc.freeze()
            if task is not None and (summary.rows_read % 200 == 0):
                progress.update(task, completed=summary.rows_read, description=_said(summary))
    except BaseException:
        # stopped (a signal: service.cli.stop_signals) or failed: what was handed to the
        # committer is written, in order, and its thread ended before the database is closed
        # under it; what a row left unsaved is not (docs/replay.md, "Stopping a replay")
        replayer.commands.committer.close()
        raise
    finally:
        rows.close()
        gc.unfreeze()  # what follows collects as usual
    replayer.commit_all()
    if on_replayed is not None:  # at once: a stop from here on leaves the whole replay
        on_replayed(summary)
    if task is not None:  # the last rows' counts too, so the bar agrees with the summary
        progress.update(task, completed=summary.rows_read, total=summary.rows_read,
                        description=_said(summary))
    summary.final_states = replayer.final_states()
    summary.wall_time_s = time.perf_counter() - started
    return summary


def _refuse_a_database_with_vms(services: Services) -> None:
    """Raises ``ValueError`` when the database already has a VM (the replay must be its only
    writer, from the start: docs/replay.md, "Being the only writer")."""
    if services.app.recorder.select_notifications(0, 1, topics=list(FIRST_TOPICS)):
        raise ValueError("the database already has VMs; replay into an empty one")


def _said(summary: Summary) -> str:
    return f"replaying: {summary.vms_created} VMs, {sum(summary.refused.values())} refused"


def replay_and_catch_up(services: Services, trace: Path | str, *, skip_jobs: int = 0,
                        max_jobs: int | None = None, max_rows: int | None = None,
                        progress: Progress | None = None,
                        on_replayed: Callable[[Summary], None] | None = None) -> Summary:
    """``replay`` with the read models caught up beside it by a ``Follower`` process, then
    ``catch_up`` to the head (which waits for the follower's last pass): on two cores the
    read models' work overlaps the replay's. ``on_replayed`` as ``replay``'s, before the
    catch-up. Raises what ``replay`` raises (the follower is then stopped)."""
    _refuse_a_database_with_vms(services)  # before a follower starts on such a database
    follower = Follower(services.settings)
    follower.start()
    try:
        summary = replay(services, trace, skip_jobs=skip_jobs, max_jobs=max_jobs,
                         max_rows=max_rows, progress=progress, on_replayed=on_replayed)
        catch_up(services, summary, progress, follower=follower)
    except BaseException:  # failed, or stopped by a signal (in the catch-up too)
        follower.stop()
        raise
    return summary


def catch_up(services: Services, summary: Summary, progress: Progress | None = None, *,
             follower: Follower | None = None) -> None:
    """Bring every read model up to the log's head, timing it into ``summary``; with the
    ``follower`` of the replay, wait for its last pass first, then catch up whatever it
    left. ``summary.applied_beside`` is what the follower had applied while the replay ran,
    not its last pass (which is part of the catch-up): counted before the positions are
    read, so that it and ``summary.behind_at_end`` add up to at most the positions the
    read models gained in all (a tester: counted after the last pass, the two came to
    1,492 of a log of 774 positions)."""
    started = time.perf_counter()
    runner = services.projections
    gained = None
    if follower is not None:
        summary.applied_beside = follower.applied
    head, before = runner.head(), runner.positions()
    # what the catch-up's time says: how far the follower was left behind (it shares the
    # cores with the replay), not only what the read models cost (docs/replay.md)
    summary.behind_at_end = sum(max(0, head - p) for p in before.values())
    if progress is not None:
        # Counted in positions gained, summed over the read models: the runner's callback
        # counts log events per batch, and one batch may serve several read models.
        task = progress.add_task("read models (positions, summed)",
                                 total=sum(head - p for p in before.values()))

        def gained(_n: int = 0) -> None:
            now = runner.positions()
            progress.update(task, completed=sum(min(now[name], head) - p
                                                for name, p in before.items()))

    if follower is not None:
        follower.finish(while_waiting=gained)
    runner.catch_up(progress=gained)
    if gained is not None:
        gained()
    summary.catch_up_s = time.perf_counter() - started
