"""The read models caught up beside a replay, in a process of their own (``Follower``), so that
on two cores the projections' work overlaps the replay's instead of following it.

The replay is one Python process whose CPU the interpreter's lock serializes: a thread would
only take turns with it. A second process reads the log as the replay writes it and applies it
to every read model, batch by batch, through the service's own ``ProjectionRunner`` (the same
transactions and tracking positions as ``vmledger serve``'s runner: a batch and its position
commit together, and a rival runner's compare-and-set refuses an overlapping batch). When the
replay has committed its last append the follower makes one last pass to the head and ends;
``service.replay.run.catch_up`` then brings every read model to the head itself, so what the
follower did not do (it failed, or it was slow to start) is done there, and the read models
end exactly as a catch-up after the replay would leave them.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.synchronize
import signal
from collections.abc import Callable
from multiprocessing.sharedctypes import Synchronized
from typing import Any

from service.settings import Settings

log = logging.getLogger(f"vmledger.{__name__}")

# Larger than the live runner's batches: the follower is behind by thousands of events most of
# the time, and a batch's cost is mostly per batch and per VM touched in it (docs/performance.md,
# P3). Small enough that a batch's transaction holds SQLite's write lock well below its busy
# timeout, which the replay's own commits wait on.
FOLLOW_BATCH = 2_000
# How long the follower waits after a pass that found nothing new.
IDLE_WAIT_S = 0.2


class Follower:
    """A process that keeps the read models of ``settings``' database close to the log while
    a replay writes it: ``start``, then ``finish`` once every append is committed. Reports
    how many events it applied, summed over read models (``applied``)."""

    def __init__(self, settings: Settings):
        context = multiprocessing.get_context("spawn")  # no copy of the replay's connections
        self._done = context.Event()
        self._applied: Synchronized[int] = context.Value("q", 0)  # type: ignore[assignment]
        self._process = context.Process(
            target=_follower, args=(settings, self._done, self._applied),
            name="vmledger-replay-follower", daemon=True)
        self._count = 0  # ``applied`` once the process is released

    def start(self) -> None:
        """Start following (the process imports the service: about a second). The process
        starts with SIGINT blocked, for good: a terminal's ^C reaches the whole process
        group, and it is the replay's to decide (``stop``); ignored only once the process
        had imported the service, one during the imports printed their traceback."""
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:  # a ^C meanwhile waits for the replay's mask to be set back: none is lost
            self._process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def finish(self, while_waiting: Callable[[], None] | None = None) -> bool:
        """Tell the follower that the replay has committed everything, and wait until its
        last pass has ended, calling ``while_waiting`` (a progress bar) every half second.
        True if it ended well; a failure is logged as a warning (a bug's traceback is on
        stderr) and leaves its work to the caller's catch-up."""
        self._done.set()
        while self._process.is_alive():
            self._process.join(0.5)
            if while_waiting is not None:
                while_waiting()
        exitcode = self._process.exitcode
        self._release()
        if exitcode != 0:
            log.warning("the read models' follower ended with exit code %s; the catch-up "
                        "after the replay does its work", exitcode)
            return False
        return True

    def stop(self) -> None:
        """End the follower now (the replay failed, or was stopped by a signal): a batch it
        was applying is rolled back with its position. Nothing once it has ended."""
        if self._process is None:  # finished, or stopped, already
            return
        self._process.terminate()
        self._process.join()
        self._release()

    def _release(self) -> None:
        """Release the process and the shared objects (``_done``, ``_applied``: six POSIX
        semaphores), keeping the count. Each semaphore is unlinked when its last reference
        goes (multiprocessing's finalizer); a process killed before then leaves it to the
        resource tracker, which warns of "leaked semaphore objects" (operator tester, a
        replay stopped by SIGTERM). The process object holds them too, as its arguments."""
        if self._process is None:
            return
        self._count = int(self._applied.value)
        self._process.close()
        self._process = self._done = self._applied = None  # type: ignore[assignment]

    @property
    def applied(self) -> int:
        """Events the follower applied so far, summed over the read models."""
        return self._count if self._process is None else int(self._applied.value)


def _follower(settings: Settings, done: multiprocessing.synchronize.Event,
              applied: Any) -> None:
    """The follower process's target: ``follow``, logging as the replay command does (warnings
    and errors, one line each), and ending with status 1 and no traceback when the database could
    not be reached or was lost: the replay says so itself, in one line."""
    from service.database_failures import database_failure
    from service.logs import setup_command_logging

    setup_command_logging()
    try:
        follow(settings, done, applied)
    except Exception as error:
        if database_failure(error) is None:
            raise  # a bug: its traceback, on stderr
        raise SystemExit(1) from None


def follow(settings: Settings, done: multiprocessing.synchronize.Event,
           applied: Any) -> None:
    """The follower process: apply the log to every read model until ``done`` is set, then
    once more to the head. ``applied`` (a shared counter) counts the events applied, summed
    over the read models."""
    from eventsourcing.persistence import OperationalError

    from projections.tracking import ProjectionConflictError
    from service.container import Services

    from service.logs import Throttled

    services = Services.build(settings, register_fleet=False)  # it writes read models only
    # the busy timeout may run out often while the replay commits; in an outage, every pass
    failed = Throttled(log, "the follower's pass failed, trying again", level=logging.WARNING)
    try:
        runner = services.projections
        models = list(runner.read_models.values())
        replay = multiprocessing.parent_process()
        while replay is None or replay.is_alive():  # an orphan (the replay killed) ends
            # Read before the pass: a pass begun after the replay's last commit reaches it.
            last = done.is_set()
            try:
                gained = runner.catch_up_models(models, batch_size=FOLLOW_BATCH)
            except ProjectionConflictError:
                # another runner applied that batch: read the positions again, not at once
                done.wait(IDLE_WAIT_S)
                continue
            except OperationalError as error:
                # SQLite's busy timeout ran out: the replay's committer, with a full batch
                # always waiting, takes the write lock again after each commit before the
                # busy handler looks. The batch was rolled back with its position; try again
                # (after the replay's end the catch-up does what a failed last pass left).
                if last:
                    raise
                failed(error)
                done.wait(IDLE_WAIT_S)
                continue
            with applied.get_lock():
                applied.value += gained
            if last:
                return
            if not gained:
                done.wait(IDLE_WAIT_S)
    finally:
        services.close()
