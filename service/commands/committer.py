"""Group commit: the appends of many commands (from concurrent requests, the worker and the
agents) written together, one transaction, one table lock, one WAL flush and one ``NOTIFY`` a
batch (docs/performance.md, "Group commit").

The event store serializes every append behind one table lock, so one append a transaction
caps every writer near a thousand a second whatever the language; a batch pays the lock and
the flush once. Per stream nothing changes: each append keeps its own savepoint, so one whose
expected version (or idempotency key) is already taken fails ALONE, with the same
``IntegrityError`` ``Application.save`` raises, and the rest of its batch commits; an
append's idempotency record commits with its own events; each caller gets its own
recordings, so its own position.

One committer thread a process takes whatever appends are waiting when it is free (no timer:
batches grow with the load, and a lone command is written at once), at most ``max_appends``.
The same thread runs the commands of async HTTP routes to their end (``run``; one greenlet
each, service/commands/tasks.py): their appends join the batches like any other thread's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from concurrent.futures import Future, TimeoutError as FutureTimeout
from contextvars import Context
from typing import Any, TypeVar

from eventsourcing.application import Application, ProcessingEvent
from eventsourcing.persistence import IntegrityError, Notification, OperationalError, Recording

from service.commands.aggregate_cache import SavedHere
from service.commands.tasks import (
    SAVE, SLEEP, CommandFuture, CommandTask, Tasks, current_task,
)
from service.commands.turns import Turns
from service.db_limits import request_wait_bound
from service.storage import Append, Outcome

log = logging.getLogger(__name__)

Recordings = list[Recording[Any]]
T = TypeVar("T")
_NO_TURN: AbstractContextManager[None] = nullcontext()  # reusable: it holds nothing


class CommitWaitTimeout(OperationalError):
    """An HTTP request waited its database bound for the committer's answer (a 503). Its
    message says whether the append was ``withdrawn`` from the queue (it will never be
    written) or its batch was already being written (it may yet commit: the client learns
    which by retrying with its ``Idempotency-Key``, or by reading the resource;
    docs/operations.md, ``VMLEDGER_POSTGRES_REQUEST_WAIT_S``)."""

    def __init__(self, bound_s: float, *, withdrawn: bool):
        outcome = "not appended" if withdrawn else "it may still be appended"
        super().__init__(f"no answer from the committer in {bound_s} s: {outcome}")


class Handover:
    """One append handed to the committer, waiting for its batch: with a ``future`` for a
    caller that waits (``Committer.submit``), or none for the replay, which hands over
    thousands a second and learns the outcomes batch by batch (``Committer.hand_over``):
    a ``Future`` (its ``Condition`` and lock) for each append was a tenth of the whole
    shard's replay (docs/performance.md). ``done`` once settled; then ``outcome`` is its
    recordings, or the exception it met."""

    __slots__ = ("processing", "stored", "future", "done", "outcome", "task")

    def __init__(self, processing: ProcessingEvent[Any], stored: Sequence[Any], *,
                 future: bool = True, task: CommandTask | None = None):
        self.processing = processing
        self.stored = stored
        self.future: Future[Recordings] | None = Future() if future else None
        self.done = False
        self.outcome: Recordings | BaseException | None = None
        self.task = task  # a command task parked on this append

    def settle(self, outcome: Recordings | BaseException) -> None:
        """Record the outcome (the committer's thread, or ``submit`` for an empty append)."""
        self.outcome = outcome
        self.done = True
        if self.future is not None:
            if isinstance(outcome, BaseException):
                self.future.set_exception(outcome)
            else:
                self.future.set_result(outcome)


def _collected(aggregates: Sequence[Any], kwargs: dict[str, Any]) -> ProcessingEvent[Any]:
    """``ProcessingEvent.collect_events(*aggregates, **kwargs)`` for aggregates (every
    caller's): the library's version asks two ``runtime_checkable`` protocols of each
    object, and ``isinstance`` against a protocol costs more than the collection itself."""
    processing: ProcessingEvent[Any] = ProcessingEvent()
    for aggregate in aggregates:
        processing.events.extend(aggregate.collect_events())
        processing.aggregates[aggregate.id] = aggregate
    processing.saved_kwargs.update(kwargs)
    return processing


class Committer:
    """Saves aggregates as ``Application.save`` does (the same recordings, the same errors;
    aggregates only, with ``save``'s keyword arguments), batching concurrent callers into one
    transaction of the recorder's ``insert_batch`` (the ledger's recorders have one:
    service/storage.py; a recorder without it is refused here, not at each save)."""

    def __init__(self, app: Application[Any], *, max_appends: int = 128, linger_s: float = 0.0,
                 one_thread: bool = False, cache_saves: bool = True):
        if not hasattr(app.recorder, "insert_batch"):
            raise TypeError(f"{type(app.recorder).__name__} has no insert_batch: group "
                            "commit needs one of service.storage's recorders")
        self.app = app
        self.max_appends = max_appends
        # How long a batch that is not full waits for more appends: 0 for callers that wait
        # for their answer (their concurrency makes the batches), more for a lone writer that
        # does not wait (the trace replay).
        self.linger_s = linger_s
        self._queue: list[Handover] = []
        self._wake = threading.Condition()
        self._settled = threading.Condition()  # notified after each batch's outcomes
        self._thread: threading.Thread | None = None
        self._closed = False
        # A process whose changes all run on one thread (the replay) has no turns to take: a
        # turn's gate and locks were a tenth of the whole shard's replay (docs/performance.md).
        self._one_thread = one_thread
        self._turns = Turns(on_release=self._turn_released)
        self._tasks = Tasks(turn_free=self._turns.free_for)  # only the thread's own
        # handed over by ``run``, not yet started: (command, context, future)
        self._incoming: list[tuple[Callable[[], Any], Context, CommandFuture]] = []
        # Each committed aggregate is cached, with the version this process appended
        # (``SavedHere``): the change loop may decide on it unread (aggregate_cache). Not
        # with ``cache_saves`` False, for a caller that goes on changing the aggregates it
        # saved (the replay, which keeps its own): the cache holds committed folds only.
        cache = app.repository.cache
        self._cache = cache if cache_saves else None
        self.saved_here = SavedHere(getattr(cache, "maxsize", 0) or 10_000)
        self.batches = 0  # how many transactions, and how many appends they held
        self.appends = 0

    def turn(self, stream: object) -> AbstractContextManager[None]:
        """Hold ``stream``'s turn: callers of this process that change the same stream wait
        for each other (the change loop holds it from its load to its commit), so they do not
        meet in one batch with the same expected version, one of them bound to conflict.
        Other streams, and other processes, are not held. Built ``one_thread``, nothing is
        held: there is no other caller."""
        return _NO_TURN if self._one_thread else self._turns.held(stream)

    def run(self, command: Callable[[], T], context: Context) -> CommandFuture:
        """Run ``command`` (synchronous code that may load, decide and ``save``) on the
        committer's thread in ``context``, as a task that parks where a thread would wait
        (service/commands/tasks.py); a future of its result or error, which the caller may
        give up (``CommandFuture.give_up``: withdrawn unless its append is in a batch)."""
        future = CommandFuture(wake=self._wake_loop)
        with self._wake:
            self._check_open()
            self._incoming.append((command, context, future))
            self._start_thread()
            self._wake.notify()
        return future

    def pause(self, seconds: float) -> None:
        """Sleep ``seconds`` (a back-off): a task parks instead, and the thread goes on."""
        task = current_task(self)
        if task is None:
            time.sleep(seconds)
        else:
            task.park(SLEEP, time.monotonic() + seconds)

    def save(self, *aggregates: Any, **kwargs: Any) -> Recordings:
        """Append the aggregates' pending events (with ``kwargs``, e.g. an idempotency
        record, in the same transaction) and wait; the recordings, as ``Application.save``
        returns them. Raises ``IntegrityError`` when another writer took one of the streams'
        next versions (or the idempotency key) first: this append alone is rolled back.

        Within an HTTP request the wait ends after the request's database bound
        (``request_wait_bound``), as the request's own database calls do: then an append
        still queued is withdrawn, and ``CommitWaitTimeout`` says whether it may yet commit.
        A command task (``run``) parks until its batch is written instead of waiting."""
        task = current_task(self)
        if task is not None:
            return self._save_parked(task, aggregates, kwargs)
        future = self.submit(*aggregates, **kwargs)
        bound = request_wait_bound()
        try:
            return future.result(timeout=bound)
        except FutureTimeout:
            assert bound is not None
            if future.cancel():  # only before the committer's thread took it (``_run``)
                raise CommitWaitTimeout(bound, withdrawn=True) from None
            if future.done():  # answered just now
                return future.result()
            raise CommitWaitTimeout(bound, withdrawn=False) from None

    def _save_parked(self, task: CommandTask, aggregates: Sequence[Any],
                     kwargs: dict[str, Any]) -> Recordings:
        task.check_wanted()  # the last moment a given-up command can be left unappended
        pending = self._hand(aggregates, kwargs, future=False, task=task)
        if not pending.done:
            task.park(SAVE, pending)  # resumed once ``_commit`` settles it
        if isinstance(pending.outcome, BaseException):
            raise pending.outcome
        assert pending.outcome is not None
        return pending.outcome

    def submit(self, *aggregates: Any, **kwargs: Any) -> Future[Recordings]:
        """``save`` without waiting: a future of its recordings."""
        future = self._hand(aggregates, kwargs, future=True).future
        assert future is not None
        return future

    def hand_over(self, *aggregates: Any) -> Handover:
        """``submit`` without a future, for a caller that does not wait for each append (the
        replay's deferred saves): its outcome is on the ``Handover`` once ``done``;
        ``wait_for`` blocks until then."""
        return self._hand(aggregates, {}, future=False)

    def wait_for(self, handover: Handover, timeout: float | None = None) -> Recordings:
        """Block until ``handover`` (from ``hand_over``) is settled, at most ``timeout``
        seconds if given; its recordings. Raises the error its append met
        (``IntegrityError`` for a conflict), or ``TimeoutError``."""
        if not handover.done:
            with self._settled:
                if not self._settled.wait_for(lambda: handover.done, timeout):
                    raise TimeoutError(f"the append was not settled in {timeout} s")
        if isinstance(handover.outcome, BaseException):
            raise handover.outcome
        assert handover.outcome is not None
        return handover.outcome

    def _hand(self, aggregates: Sequence[Any], kwargs: dict[str, Any], *,
              future: bool, task: CommandTask | None = None) -> Handover:
        processing = _collected(aggregates, kwargs)
        pending = Handover(processing,
                           [self.app.mapper.to_stored_event(e) for e in processing.events],
                           future=future, task=task)
        if not pending.stored:
            pending.settle([])
            return pending
        with self._wake:
            self._check_open()
            self._queue.append(pending)
            self._start_thread()
            # The thread waits for a first append, or (lingering) for a full batch: waking
            # it for every append of a lingering batch only costs a switch each (the replay).
            # A task's append is queued by the thread itself, awake.
            if task is None and (len(self._queue) == 1 or len(self._queue) >= self.max_appends):
                self._wake.notify()
        return pending

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the committer is closed")

    def _start_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="vmledger-committer",
                                            daemon=True)
            self._thread.start()

    def _turn_released(self) -> None:
        """A turn was given back: a task parked on it may go on. A task's own release is
        seen by the loop it runs in; another thread's must wake the loop."""
        if threading.current_thread() is not self._thread:
            self._wake_loop()

    def _wake_loop(self) -> None:
        with self._wake:
            self._wake.notify()

    def close(self) -> None:
        """Write what is queued and run the tasks to their end, then stop the thread."""
        with self._wake:
            self._closed = True
            self._wake.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=30)

    def _run(self) -> None:
        while True:
            with self._wake:
                while not (self._queue or self._incoming or self._tasks.runnable()):
                    if self._closed and not self._tasks:
                        return
                    self._wake.wait(self._tasks.next_wake_in())
                for command, context, future in self._incoming:
                    self._tasks.start(command, context, future, owner=self)
                self._incoming.clear()
            # The tasks first: each runs until it parks (on its append, queued now) or ends.
            self._tasks.run()
            with self._wake:
                deadline = time.monotonic() + self.linger_s
                while len(self._queue) < self.max_appends and not self._closed:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._wake.wait(left)
                taken = self._queue[:self.max_appends]
                del self._queue[:self.max_appends]
            # An append whose caller stopped waiting (``save``'s bound) is not written.
            batch = [p for p in taken
                     if p.future is None or p.future.set_running_or_notify_cancel()]
            if batch:
                self._commit(batch)
                for pending in batch:
                    if pending.task is not None:
                        self._tasks.resume(pending.task, pending.outcome)
                with self._settled:
                    self._settled.notify_all()

    def _commit(self, batch: list[Handover]) -> None:
        appends: list[Append] = [(p.stored, p.processing.saved_kwargs) for p in batch]
        try:
            outcomes = self.app.recorder.insert_batch(appends)  # type: ignore[attr-defined]
        except BaseException as error:  # noqa: BLE001 - every caller gets the batch's error
            for pending in batch:
                pending.settle(error)
            return
        self.batches += 1
        self.appends += len(batch)
        for pending, outcome in zip(batch, outcomes, strict=True):
            self._settle(pending, outcome)

    def _settle(self, pending: Handover, outcome: Outcome) -> None:
        if isinstance(outcome, IntegrityError):
            pending.settle(outcome)
            return
        try:
            recordings = [
                Recording(event, Notification(
                    id=notification_id, originator_id=stored.originator_id,
                    originator_version=stored.originator_version, topic=stored.topic,
                    state=stored.state))
                for event, stored, notification_id in zip(
                    pending.processing.events, pending.stored, outcome, strict=True)
            ]
            cache = self._cache  # as Application._record leaves it
            if cache is not None:
                for aggregate_id, aggregate in pending.processing.aggregates.items():
                    cache.put(aggregate_id, aggregate)
                    self.saved_here.record(aggregate_id, aggregate.version)
        except BaseException as error:  # noqa: BLE001 - the caller must hear of it
            log.exception("settling a committed append")
            pending.settle(error)
            return
        pending.settle(recordings)
