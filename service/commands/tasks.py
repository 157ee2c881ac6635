"""Commands run on the committer's own thread, one greenlet each, so an ``async`` HTTP route
hands its command over and awaits the answer with no thread-pool hop (issue #15, "a lean
HTTP edge"; docs/architecture.md, "The command tasks").

A command is the same synchronous code every writer runs (``Commands.create_vm``, the change
loop, its loads and decisions): nothing in it knows where it runs. Where a thread would wait,
a task parks instead and the committer's loop goes on with the others:

- on its append (``Committer.save``): the append joins the next batch, beside other threads'
  appends, and the task resumes with its own outcome (its recordings, or the conflict);
- on a stream's turn that another task or thread holds (``Committer.turn``);
- on a back-off after a conflict (``Committer.pause``).

A caller that stops waiting gives its command up (``CommandFuture.give_up``): one not yet
started never runs, and one that has not handed over its append yet is withdrawn where it next
parks or would hand it over (``TaskWithdrawn``: nothing appended); one whose append is already
in a batch commits, or fails, with that batch.

Its database reads block the committer's thread while they last (each bounded within an
HTTP request, service/db_limits.py); that is the price of having no second thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from contextvars import Context
from typing import Any

from greenlet import getcurrent, greenlet

log = logging.getLogger(__name__)

#: What a parked task waits for: its append's batch, a stream's turn, or a moment.
SAVE, TURN, SLEEP = "save", "turn", "sleep"


class TaskWithdrawn(Exception):
    """A command task ended before its append because its caller gave it up: nothing of it
    was appended."""


class CommandFuture(Future[Any]):
    """The future of a command handed to the committer (``Committer.run``); ``wake`` wakes
    the committer's loop."""

    def __init__(self, wake: Callable[[], None]):
        super().__init__()
        self.given_up = False
        self._wake = wake

    def give_up(self) -> bool:
        """The caller stops waiting. True when the command never started (it never will);
        else it is withdrawn unless its append is already in a batch (module docstring)."""
        if self.cancel():
            return True
        self.given_up = True
        self._wake()  # a task parked on a turn or a back-off ends now
        return False


class CommandTask(greenlet):
    """One command, run to its end on the committer's thread in ``context`` (the request's:
    its log scope and database bound), its result or error set on ``future``."""

    def __init__(self, command: Callable[[], Any], context: Context, future: CommandFuture,
                 owner: object):
        super().__init__(run=self._body)
        self.gr_context = context
        self.command = command
        self.future = future
        self.owner = owner  # the committer whose thread runs it
        self.waiting: tuple[str, Any] | None = None
        self.resume_with: Any = None

    def _body(self) -> None:
        try:
            result = self.command()
        except BaseException as error:  # noqa: BLE001 - the awaiting route raises it
            self.future.set_exception(error)
        else:
            self.future.set_result(result)

    def park(self, kind: str, value: Any) -> Any:
        """Give the thread back to the committer's loop until it resumes this task; what it
        resumes with (``SAVE``: the append's outcome). Raises ``TaskWithdrawn`` when the
        task was given up while it waited for a turn or a back-off."""
        self.waiting = (kind, value)
        resumed = self.parent.switch()
        if kind != SAVE:
            self.check_wanted()
        return resumed

    def check_wanted(self) -> None:
        """Raise ``TaskWithdrawn`` if the caller gave this command up."""
        if self.future.given_up:
            raise TaskWithdrawn("the caller stopped waiting before the command was appended")


def current_task(owner: object) -> CommandTask | None:
    """The task of ``owner`` (a committer) running now, or None on any other greenlet."""
    current = getcurrent()
    if isinstance(current, CommandTask) and current.owner is owner:
        return current
    return None


class Tasks:
    """The committer's tasks: started, parked, resumed (only ever on the committer's
    thread). ``turn_free(stream, task)`` says whether a task may take a stream's turn."""

    def __init__(self, turn_free: Callable[[str, CommandTask], bool]):
        self._turn_free = turn_free
        self._parked: list[CommandTask] = []
        self._ready: list[CommandTask] = []

    def __bool__(self) -> bool:
        return bool(self._parked or self._ready)

    def start(self, command: Callable[[], Any], context: Context, future: CommandFuture,
              owner: object) -> None:
        """Make ``command``'s task (here: a greenlet belongs to the thread that makes it) to
        run at the next ``run``, unless its caller already gave up."""
        if future.set_running_or_notify_cancel():
            self._ready.append(CommandTask(command, context, future, owner))

    def resume(self, task: CommandTask, value: Any) -> None:
        """``task``'s append is settled: run it on with ``value`` at the next ``run``."""
        self._parked.remove(task)
        task.resume_with = value
        self._ready.append(task)

    def runnable(self) -> bool:
        """Whether ``run`` has anything to do now."""
        return bool(self._ready) or any(self._can_go_on(t) for t in self._parked)

    def next_wake_in(self) -> float | None:
        """Seconds until the first sleeping task may go on (None: no task sleeps)."""
        wakes = [t.waiting[1] for t in self._parked if t.waiting and t.waiting[0] == SLEEP]
        return max(0.0, min(wakes) - time.monotonic()) if wakes else None

    def run(self) -> None:
        """Run every task that can go on until each has parked or ended; a task that ends
        may free a turn another waits for, so go round until nothing moves."""
        while True:
            parked = self._parked
            movable, self._ready = self._ready, []
            self._parked = []
            for task in parked:
                (movable if self._can_go_on(task) else self._parked).append(task)
            if not movable:
                return
            for task in movable:
                value, task.resume_with, task.waiting = task.resume_with, None, None
                try:
                    task.switch(value) if task else task.switch()  # started, or not yet
                except BaseException as error:  # noqa: BLE001 - the loop must go on
                    log.exception("a command task failed outside its command")
                    if not task.future.done():
                        task.future.set_exception(error)
                    continue
                if not task.dead:
                    self._parked.append(task)

    def _can_go_on(self, task: CommandTask) -> bool:
        if task.waiting is None:
            return False
        kind, value = task.waiting
        if kind != SAVE and task.future.given_up:
            return True  # to end it: it parks no longer for a caller who is gone
        if kind == TURN:
            return self._turn_free(value, task)
        if kind == SLEEP:
            return time.monotonic() >= value
        return False  # SAVE: resumed by ``resume`` once its batch is written
