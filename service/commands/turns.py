"""Streams' turns within one process: a writer holds its stream's turn from its load to its
commit, so two of the process's writers of one stream never meet in one batch with the same
expected version, one of them bound to conflict (service/commands/committer.py).

A holder is a thread, or a command task on the committer's thread (service/commands/tasks.py),
each its own greenlet: a task must never block that thread, so it parks until the turn is
free, where a thread waits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from greenlet import getcurrent

from service.commands.tasks import TURN, CommandTask


class Turns:
    """Who holds which stream's turn, and how deep (a decision may change its own stream
    again). ``on_release`` is called, outside the lock, whenever a turn is given back while
    tasks may be waiting for one (the committer wakes its loop)."""

    def __init__(self, on_release: Callable[[], None]):
        self._holders: dict[str, tuple[object, int]] = {}
        self._changed = threading.Condition()
        self._on_release = on_release

    @contextmanager
    def held(self, stream: object) -> Iterator[None]:
        """Hold ``stream``'s turn for the block: wait (a thread) or park (a task) until no
        other holder has it."""
        key = str(stream).lower()
        me = getcurrent()
        if isinstance(me, CommandTask):
            while not self._take(key, me):
                me.park(TURN, key)
        else:
            with self._changed:
                self._changed.wait_for(lambda: self._take_locked(key, me))
        try:
            yield
        finally:
            self._give_back(key)

    def free_for(self, stream: str, holder: object) -> bool:
        """Whether ``holder`` could take ``stream``'s turn now."""
        with self._changed:
            owner = self._holders.get(stream, (holder, 0))[0]
            return owner is holder

    def _take(self, key: str, me: object) -> bool:
        with self._changed:
            return self._take_locked(key, me)

    def _take_locked(self, key: str, me: object) -> bool:
        owner, depth = self._holders.get(key, (me, 0))
        if owner is not me:
            return False
        self._holders[key] = (me, depth + 1)
        return True

    def _give_back(self, key: str) -> None:
        with self._changed:
            owner, depth = self._holders[key]
            if depth > 1:
                self._holders[key] = (owner, depth - 1)
                return
            del self._holders[key]
            self._changed.notify_all()
        self._on_release()
